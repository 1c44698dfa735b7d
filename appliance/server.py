"""The asyncio Unix-socket server: lifecycle, peer check, one handler per connection.

Lifecycle phases: ``start`` (bind or adopt an activated socket), ``serve``,
``shutdown`` (close the listener, let in-flight requests finish up to a
timeout, end the rest with an error event, remove the socket file we made).

Each connection is one :class:`Connection` whose ``handle`` reads frames and
dispatches; every request runs as its own task, kept in a set with a
done-callback.  A bad frame is an error event, not the end of the
connection; only bytes that cannot be decoded as msgpack close it.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import os
import pwd
import socket
import stat
import struct
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack

from appliance.admission import Admission, Decision, StreamLoad
from appliance.engine.base import FloatArray, Scales
from appliance.frontend import Clause, prepare
from appliance.playback import NoAudioDevice, Utterance
from appliance.protocol import (
    CancelRequest,
    ChunkEvent,
    EndEvent,
    ErrorCode,
    ErrorEvent,
    ProtocolError,
    SimpleEvent,
    SimpleRequest,
    StartEvent,
    SynthesizeRequest,
    make_unpacker,
    pack,
    parse_request,
    request_id_of,
)
from appliance.runtime import Runtime
from appliance.streaming import (
    JobSettings,
    JobStats,
    OutputFormatter,
    SynthesisJob,
    VoiceRuntime,
)

log = logging.getLogger(__name__)
reqlog = logging.getLogger("ttsd.request")

_READ_SIZE = 65536


class ClientTooSlow(Exception):
    """The client did not read its output within the configured time."""


def default_socket_path() -> Path:
    if os.geteuid() == 0:
        return Path("/run/ttsd/ttsd.sock")
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/ttsd-{os.getuid()}"
    return Path(runtime_dir) / "ttsd" / "ttsd.sock"


@dataclass(frozen=True)
class Peer:
    pid: int
    uid: int
    gid: int


def peer_of(sock: socket.socket) -> Peer | None:
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    pid, uid, gid = struct.unpack("3i", raw)
    return Peer(pid, uid, gid)


def _user_groups(uid: int, gid: int) -> set[int]:
    try:
        name = pwd.getpwuid(uid).pw_name
    except KeyError:
        return {gid}
    return set(os.getgrouplist(name, gid))


@dataclass
class RequestState:
    id: int
    op: str
    task: asyncio.Task[None] | None = None
    job_task: asyncio.Task[None] | None = None
    job: SynthesisJob | None = None
    cancel_reason: str | None = None
    started: bool = False
    realtime: bool = True
    utterance: Utterance | None = None

    def cancel(self, reason: str) -> None:
        if self.cancel_reason is None:
            self.cancel_reason = reason
        if self.job_task is not None and not self.job_task.done():
            self.job_task.cancel()
        if self.utterance is not None:
            self.utterance.cancel()


class Server:
    def __init__(
        self,
        runtime: Runtime,
        socket_path: Path,
        activated: socket.socket | None = None,
    ) -> None:
        self.runtime = runtime
        self.socket_path = socket_path
        self._activated = activated
        self._server: asyncio.AbstractServer | None = None
        self._socket_gid: int | None = None
        self.connections: set[Connection] = set()
        self._conn_tasks: set[asyncio.Task[None]] = set()
        self._per_uid: dict[int, int] = {}
        self._stop = asyncio.Event()
        self.stopping = False
        self._conn_seq = 0
        self.on_request_done: list[Callable[[], None]] = []
        self.admission = Admission(runtime.scheduler.workers)

    # ------------------------------------------------------------ start-up

    async def start(self) -> None:
        cfg = self.runtime.config.server
        if self._activated is not None:
            sock = self._activated
            sock.setblocking(False)
            self._server = await asyncio.start_unix_server(self._accept, sock=sock)
            with contextlib.suppress(OSError):
                self._socket_gid = os.fstat(sock.fileno()).st_gid
                name = sock.getsockname()
                if isinstance(name, str) and name:
                    self._socket_gid = os.stat(name).st_gid
            log.info("serving on an activated socket")
            return
        path = self.socket_path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._remove_stale(path)
        # Created owner-only, then opened up to the configured mode: no window
        # in which the socket is reachable by anyone else.
        old = os.umask(0o177)
        try:
            self._server = await asyncio.start_unix_server(
                self._accept, path=str(path), limit=_READ_SIZE
            )
        finally:
            os.umask(old)
        os.chmod(path, cfg.socket_mode)
        self._socket_gid = os.stat(path).st_gid
        log.info("listening on %s (mode %o)", path, cfg.socket_mode)

    @staticmethod
    def _remove_stale(path: Path) -> None:
        """Replace a socket file left by a crash; refuse to steal a live daemon's socket."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            raise OSError(errno.EEXIST, f"{path} exists and is not a socket")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.settimeout(1.0)
            probe.connect(str(path))
        except (ConnectionRefusedError, FileNotFoundError):
            log.warning("removing stale socket %s", path)
            path.unlink(missing_ok=True)
            return
        except OSError as exc:
            log.warning("cannot probe %s (%s); replacing it", path, exc)
            path.unlink(missing_ok=True)
            return
        finally:
            probe.close()
        raise OSError(errno.EADDRINUSE, f"another daemon is serving on {path}")

    # ------------------------------------------------------------ serve

    async def serve(self) -> None:
        await self._stop.wait()
        await self.shutdown()

    def request_stop(self) -> None:
        self._stop.set()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._conn_seq += 1
        conn = Connection(self, reader, writer, self._conn_seq)
        task = asyncio.current_task()
        assert task is not None
        self._conn_tasks.add(task)
        task.add_done_callback(self._conn_tasks.discard)
        await conn.handle()

    async def authorize(self, peer: Peer | None) -> str | None:
        """None if the peer may connect, else the reason it may not."""
        if peer is None:
            return "peer credentials unavailable"
        cfg = self.runtime.config.server
        if peer.uid in (0, os.getuid()) or peer.uid in cfg.allowed_uids:
            return None
        if peer.gid in cfg.allowed_gids or peer.gid == self._socket_gid:
            return None
        loop = asyncio.get_running_loop()
        groups = await loop.run_in_executor(None, _user_groups, peer.uid, peer.gid)
        if self._socket_gid in groups or groups & set(cfg.allowed_gids):
            return None
        return f"uid {peer.uid} is not allowed"

    # ------------------------------------------------------------ shutdown

    async def shutdown(self) -> None:
        if self.stopping:
            return
        self.stopping = True
        log.info("shutting down: closing listener")
        if self._server is not None:
            self._server.close()
        timeout = self.runtime.config.server.shutdown_timeout_s
        inflight = [r.task for c in self.connections for r in c.requests.values() if r.task]
        if inflight:
            log.info("waiting up to %.1f s for %d in-flight requests", timeout, len(inflight))
            _done, pending = await asyncio.wait(inflight, timeout=timeout)
            if pending:
                log.warning("ending %d requests that did not finish in time", len(pending))
                for c in list(self.connections):
                    for r in list(c.requests.values()):
                        r.cancel("shutdown")
                await asyncio.wait(pending, timeout=2.0)
        for c in list(self.connections):
            c.close()
        if self._conn_tasks:
            await asyncio.wait(list(self._conn_tasks), timeout=2.0)
        if self._activated is None:
            with contextlib.suppress(FileNotFoundError):
                self.socket_path.unlink()
        log.info("shutdown complete")

    # ------------------------------------------------------------ views

    def stream_loads(self) -> list[StreamLoad]:
        """Every live synthesis request, as admission sees it."""
        out = []
        for c in self.connections:
            for r in c.requests.values():
                if r.op not in ("synthesize", "speak"):
                    continue
                producing = r.job_task is None or not r.job_task.done()
                if r.job is None:
                    out.append(StreamLoad(r.realtime, producing))
                else:
                    st = r.job.stats
                    rem = r.job.remaining_audio_s()
                    out.append(StreamLoad(r.realtime, producing, st.compute_s, st.audio_s, rem))
        return out

    def admit(self) -> Decision:
        """Admission decision for one new real-time request."""
        cfg = self.runtime.config.scheduler
        sched = self.runtime.scheduler
        return self.admission.decide(
            cfg,
            self.stream_loads(),
            sched.mean_lateness_s(cfg.admission_window_s),
            sched.overdue_s(),
        )

    def live_streams(self) -> list[dict[str, Any]]:
        out = []
        for c in self.connections:
            for r in c.requests.values():
                if r.job is not None:
                    out.append(
                        {
                            "connection": c.number,
                            "id": r.id,
                            "buffer_ms": round(r.job.buffer_s() * 1000, 1),
                            "audio_ms": round(r.job.stats.audio_s * 1000, 1),
                            "stalls": r.job.stats.stalls,
                            "realtime": r.realtime,
                        }
                    )
        return out


class Connection:
    def __init__(
        self,
        server: Server,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        number: int,
    ) -> None:
        self.server = server
        self.runtime = server.runtime
        self.cfg = server.runtime.config
        self.reader = reader
        self.writer = writer
        self.number = number
        self.requests: dict[int, RequestState] = {}
        self.peer: Peer | None = None
        self.client_key: Hashable = ("conn", number)
        """Whose speech ``stop`` silences: the peer's uid once known, so ``ttsctl stop``
        from another process of the same user stops what ``ttsctl say`` started."""
        self._closed = False
        # Back-pressure: above this many buffered bytes, drain() waits for the client.
        self._high_water = self.cfg.server.max_output_buffer_bytes
        writer.transport.set_write_buffer_limits(high=self._high_water)  # type: ignore[attr-defined]

    # ------------------------------------------------------------ the handler

    async def handle(self) -> None:
        srv = self.server
        sock = self.writer.get_extra_info("socket")
        self.peer = peer_of(sock) if sock is not None else None
        reason = await srv.authorize(self.peer)
        if reason is not None:
            log.warning("refused connection: %s", reason)
            await self._send_now(ErrorEvent(None, ErrorCode.UNAUTHORIZED, reason).to_dict())
            self.close()
            return
        limits = self.cfg.server
        uid = self.peer.uid if self.peer else -1
        if self.peer is not None:
            self.client_key = ("uid", self.peer.uid)
        if len(srv.connections) >= limits.max_connections:
            await self._send_now(
                ErrorEvent(
                    None, ErrorCode.TOO_MANY_CONNECTIONS, "connection limit reached"
                ).to_dict()
            )
            self.close()
            return
        if srv._per_uid.get(uid, 0) >= limits.max_connections_per_uid:
            await self._send_now(
                ErrorEvent(
                    None,
                    ErrorCode.TOO_MANY_CONNECTIONS_FOR_USER,
                    f"uid {uid} has too many connections",
                ).to_dict()
            )
            self.close()
            return
        srv.connections.add(self)
        srv._per_uid[uid] = srv._per_uid.get(uid, 0) + 1
        try:
            await self._read_loop()
        finally:
            srv.connections.discard(self)
            srv._per_uid[uid] -= 1
            if srv._per_uid[uid] <= 0:
                del srv._per_uid[uid]
            for r in list(self.requests.values()):
                r.cancel("disconnect")
            tasks = [r.task for r in self.requests.values() if r.task is not None]
            if tasks:
                await asyncio.wait(tasks, timeout=5.0)
            self.close()

    async def _read_loop(self) -> None:
        unpacker = make_unpacker(self.cfg.server.max_message_bytes)
        while True:
            try:
                data = await self.reader.read(_READ_SIZE)
            except (ConnectionError, OSError):
                return
            if not data:
                return
            try:
                unpacker.feed(data)
            except msgpack.BufferFull:
                await self._send_now(
                    ErrorEvent(
                        None,
                        ErrorCode.FRAME_TOO_LARGE,
                        f"a message may be at most {self.cfg.server.max_message_bytes} bytes",
                    ).to_dict()
                )
                return
            while True:
                try:
                    msg = next(unpacker)
                except StopIteration:
                    break
                except msgpack.BufferFull:
                    await self._send_now(
                        ErrorEvent(None, ErrorCode.FRAME_TOO_LARGE, "message too large").to_dict()
                    )
                    return
                except (ValueError, TypeError, OverflowError, msgpack.UnpackException) as exc:
                    # The byte stream cannot be resynchronised: say why, then close.
                    await self._send_now(
                        ErrorEvent(
                            None, ErrorCode.BAD_REQUEST, f"malformed msgpack ({type(exc).__name__})"
                        ).to_dict()
                    )
                    return
                self._dispatch(msg)

    def _dispatch(self, msg: Any) -> None:
        t_request = time.monotonic()
        try:
            req = parse_request(msg)
        except ProtocolError as exc:
            self._error_soon(request_id_of(msg), exc)
            return
        if isinstance(req, CancelRequest):
            self._cancel(req)
            return
        if req.id in self.requests:
            self._error_soon(
                req.id, ProtocolError(ErrorCode.DUPLICATE_ID, f"id {req.id} is already in flight")
            )
            return
        if self.server.stopping:
            self._error_soon(req.id, ProtocolError(ErrorCode.SHUTTING_DOWN, "shutting down"))
            return
        if len(self.requests) >= self.cfg.server.max_inflight_per_connection:
            self._error_soon(
                req.id,
                ProtocolError(
                    ErrorCode.TOO_MANY_REQUESTS,
                    f"at most {self.cfg.server.max_inflight_per_connection} requests in flight",
                ),
            )
            return
        if isinstance(req, SynthesizeRequest) and req.realtime:
            # Batch requests are always taken: they only use time no real-time stream needs.
            decision = self.server.admit()
            if not decision.admit:
                self._error_soon(
                    req.id,
                    ProtocolError(
                        ErrorCode.BUSY,
                        f"busy: {decision.reason}",
                        retry_after_ms=decision.retry_after_ms,
                    ),
                )
                return
        state = RequestState(req.id, req.op)
        if isinstance(req, SynthesizeRequest):
            state.realtime = req.realtime
        self.requests[req.id] = state
        coro = (
            self._synthesize(req, state, t_request)
            if isinstance(req, SynthesizeRequest)
            else self._simple(req)
        )
        task = asyncio.create_task(coro)
        state.task = task
        task.add_done_callback(functools.partial(self._request_finished, req.id))

    def _request_finished(self, rid: int, _task: asyncio.Task[None]) -> None:
        self.requests.pop(rid, None)
        for cb in self.server.on_request_done:
            cb()

    def _error_soon(self, rid: int | None, exc: ProtocolError) -> None:
        self.runtime.metrics.error(exc.code)
        msg = ErrorEvent.from_exc(rid, exc).to_dict()
        self._write(msg)

    # ------------------------------------------------------------ output

    def _write(self, msg: dict[str, Any]) -> None:
        if self._closed or self.writer.is_closing():
            return
        self.writer.write(pack(msg))

    async def _send_now(self, msg: dict[str, Any]) -> None:
        """Write and drain briefly (used just before closing)."""
        self._write(msg)
        with contextlib.suppress(ConnectionError, OSError, TimeoutError):
            async with asyncio.timeout(1.0):
                await self.writer.drain()

    async def send(self, msg: dict[str, Any], grace_s: float = 0.0) -> None:
        """Write with back-pressure: waits while the client's buffer is full.

        ``grace_s`` is how much audio the client still holds: a client playing in real
        time need not read until that has played, so only silence beyond it (and beyond
        ``client_too_slow_s``) makes it too slow.
        """
        if self._closed or self.writer.is_closing():
            raise ConnectionResetError("connection closed")
        self.writer.write(pack(msg))
        transport = self.writer.transport
        if transport.get_write_buffer_size() <= self._high_water:
            return
        # asyncio.timeout, not wait_for: in 3.11 wait_for can swallow a cancel that lands
        # as the drain completes, and a cancelled stream would run on.
        limit = self.cfg.server.client_too_slow_s
        last_size = transport.get_write_buffer_size()
        last_progress = time.monotonic() + grace_s
        while True:
            try:
                async with asyncio.timeout(min(0.25, limit)):
                    await self.writer.drain()
                return
            except TimeoutError:
                size = transport.get_write_buffer_size()
                now = time.monotonic()
                if size < last_size:
                    last_progress = max(last_progress, now)
                elif now - last_progress >= limit:
                    raise ClientTooSlow() from None
                last_size = size

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception):
            self.writer.close()

    # ------------------------------------------------------------ ops

    def _cancel(self, req: CancelRequest) -> None:
        target = self.requests.get(req.target)
        if target is None or target.op not in ("synthesize", "speak"):
            self._error_soon(
                req.id,
                ProtocolError(ErrorCode.BAD_REQUEST, f"no request {req.target} in flight"),
            )
            return
        target.cancel("cancel")
        self._write(SimpleEvent(req.id, "cancelled", {"target": req.target}).to_dict())

    async def _simple(self, req: SimpleRequest) -> None:
        rt = self.runtime
        op = req.op
        try:
            if op == "ping":
                await self.send(SimpleEvent(req.id, "pong").to_dict())
            elif op == "info":
                await self.send(SimpleEvent(req.id, "info", rt.info()).to_dict())
            elif op == "stats":
                await self.send(SimpleEvent(req.id, "stats", self._stats()).to_dict())
            elif op == "health":
                await self.send(SimpleEvent(req.id, "health", self._health()).to_dict())
            elif op == "warmup":
                loop = asyncio.get_running_loop()
                await loop.run_in_executor(None, rt.warm_up)
                await self.send(SimpleEvent(req.id, "ok").to_dict())
            elif op == "stop":
                if rt.player is not None:
                    rt.player.stop(self.client_key)
                await self.send(SimpleEvent(req.id, "ok").to_dict())
        except (ClientTooSlow, ConnectionError, OSError):
            return

    def _stats(self) -> dict[str, Any]:
        rt = self.runtime
        snap = rt.metrics.snapshot()
        snap["queue_depth"] = rt.scheduler.depth()
        snap["workers"] = rt.scheduler.workers
        snap["connections"] = len(self.server.connections)
        snap["streams"] = self.server.live_streams()
        snap["scheduler"] = rt.scheduler.snapshot()
        snap["admission"] = self.server.admission.snapshot(self.server.stream_loads())
        snap["busy_rejections"] = rt.metrics.errors.get(ErrorCode.BUSY, 0)
        # Client underruns: finished requests plus the streams still live.
        snap["stalls"] = rt.metrics.counters.get("stalls", 0) + sum(
            s["stalls"] for s in snap["streams"]
        )
        snap["backend"] = rt.backend_state()
        if rt.player is not None:
            snap["playback"] = rt.player.stats()
        return snap

    def _health(self) -> dict[str, Any]:
        rt = self.runtime
        age = rt.scheduler.heartbeat_age()
        backend = rt.backend_state()
        status = "ok"
        if backend.get("status") == "degraded":
            status = "degraded"
        playback = rt.player.health() if rt.player is not None else {"state": "off"}
        if rt.player is not None and playback.get("state") != "ok":
            status = "degraded"
        if age > 10.0:
            status = "failing"
        return {
            "playback": playback,
            "status": status,
            "backend": backend.get("backend", "onnx-cpu"),
            "gpu": backend.get("gpu"),
            "failovers": backend.get("failovers", 0),
            "last_alarm": backend.get("last_alarm"),
            "queue_depth": rt.scheduler.depth(),
            "uptime_s": round(rt.metrics.uptime_s(), 1),
            "worker_heartbeat_age_s": round(age, 2),
        }

    def _resolve_voice(self, req: SynthesizeRequest) -> tuple[VoiceRuntime, int | None]:
        rt = self.runtime
        name = req.voice or rt.default_voice
        voice = rt.voices.get(name)
        if voice is None:
            raise ProtocolError(ErrorCode.UNKNOWN_VOICE, f"no voice named {name[:64]!r}")
        info = rt.voice_meta[name].info
        try:
            sid = info.speaker_id(req.speaker)
        except KeyError:
            raise ProtocolError(
                ErrorCode.BAD_REQUEST, f"voice {name} has no speaker {str(req.speaker)[:64]!r}"
            ) from None
        return voice, sid

    async def _speak(
        self,
        req: SynthesizeRequest,
        state: RequestState,
        job: SynthesisJob,
        voice: VoiceRuntime,
        t0: float,
    ) -> tuple[str, dict[str, Any]]:
        """``speak``: synthesize into the player; relay queued → started → end."""
        player = self.runtime.player
        assert player is not None
        try:
            utt = player.submit(req.priority, req.volume, voice.sample_rate, self.client_key)
        except NoAudioDevice as exc:
            raise ProtocolError(ErrorCode.NO_AUDIO_DEVICE, str(exc) or "no audio device") from exc
        except ValueError as exc:
            raise ProtocolError(ErrorCode.BAD_REQUEST, str(exc)) from exc
        state.utterance = utt
        state.started = True
        await self.send(SimpleEvent(req.id, "queued", {"position": utt.position}).to_dict())
        if state.cancel_reason is not None:
            utt.cancel()

        async def emit(_event: ChunkEvent, samples: FloatArray) -> None:
            if not utt.push(samples):
                # Cut, dropped or stopped: no one will hear the rest, so stop making it.
                raise asyncio.CancelledError()

        async def produce() -> None:
            try:
                await job.run(emit)
            finally:
                utt.finish()

        async def relay_started() -> None:
            latency = await utt.wait_started()
            if latency is not None:
                # The player counts from its submit; the request arrived before the frontend.
                total = latency + (utt.created - t0) * 1000.0
                self._write(
                    SimpleEvent(req.id, "started", {"latency_ms": round(total, 2)}).to_dict()
                )

        state.job_task = asyncio.create_task(produce())
        started_task = asyncio.create_task(relay_started())
        try:
            with contextlib.suppress(asyncio.CancelledError):
                await state.job_task
            info = await utt.wait_ended()
            # Let 'started' go out first when it happened.
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(started_task), timeout=0.5)
        finally:
            started_task.cancel()
        stats = job.stats.to_dict()
        stats.update(info.stats)
        stats["reason"] = info.reason
        cancelled = info.cancelled or state.cancel_reason is not None
        self.runtime.metrics.request_done(stats, cancelled)
        if state.cancel_reason == "shutdown":
            raise ProtocolError(ErrorCode.SHUTTING_DOWN, "the daemon is shutting down")
        if info.reason == "device_lost":
            raise ProtocolError(ErrorCode.NO_AUDIO_DEVICE, "the audio device was lost")
        if state.cancel_reason != "disconnect":
            self._write(EndEvent(req.id, cancelled, stats, interrupted=info.interrupted).to_dict())
        return ("cancelled" if cancelled else info.reason), stats

    async def _synthesize(self, req: SynthesizeRequest, state: RequestState, t0: float) -> None:
        rt = self.runtime
        outcome = "error"
        stats: dict[str, Any] = {}
        try:
            if req.op == "speak" and rt.player is None:
                raise ProtocolError(ErrorCode.NO_AUDIO_DEVICE, "playback is off in this daemon")
            voice, sid = self._resolve_voice(req)
            loop = asyncio.get_running_loop()
            clauses: list[Clause] = await loop.run_in_executor(
                None, prepare, req.text, voice.language, rt.frontend_limits()
            )
            t_frontend = time.monotonic()
            d = voice.defaults
            scales = Scales(
                d.noise_scale if req.noise_scale is None else req.noise_scale,
                d.length_scale / req.speed if req.speed else d.length_scale,
                d.noise_w if req.noise_w is None else req.noise_w,
            )
            cfg = self.cfg
            settings = JobSettings(
                scales=scales,
                speaker=sid,
                mode=req.mode or cfg.streaming.default_mode,
                realtime=req.realtime,
                context=cfg.engine.context_frames,
                watermark_s=cfg.scheduler.watermark_ms / 1000.0,
                join_fade_ms=cfg.streaming.join_fade_ms,
            )
            out_rate = req.sample_rate or voice.sample_rate
            if req.op == "speak":
                # The player applies the volume and resamples to the device itself.
                formatter = OutputFormatter(voice.sample_rate, voice.sample_rate, "f32le", 1.0)
            else:
                formatter = OutputFormatter(voice.sample_rate, out_rate, req.format, req.volume)
            jstats = JobStats(t_request=t0, frontend_ms=(t_frontend - t0) * 1000)
            job = SynthesisJob(req.id, voice, clauses, settings, rt.scheduler, formatter, jstats)
            state.job = job
            if state.cancel_reason is not None:
                raise asyncio.CancelledError()
            if req.op == "speak":
                outcome, stats = await self._speak(req, state, job, voice, t0)
                return
            await self.send(StartEvent(req.id, out_rate, req.format, voice.name).to_dict())
            state.started = True

            async def emit(event: ChunkEvent, _samples: FloatArray) -> None:
                await self.send(event.to_dict(), grace_s=job.buffer_s())

            state.job_task = asyncio.create_task(job.run(emit))
            try:
                await state.job_task
            except asyncio.CancelledError:
                if state.cancel_reason is None:
                    raise
            stats = jstats.to_dict()
            if req.realtime and state.cancel_reason is None:
                self.server.admission.observe(jstats.compute_s, jstats.audio_s)
            if state.cancel_reason in ("shutdown",):
                raise ProtocolError(ErrorCode.SHUTTING_DOWN, "the daemon is shutting down")
            cancelled = state.cancel_reason is not None
            outcome = "cancelled" if cancelled else "end"
            rt.metrics.request_done(stats, cancelled)
            if state.cancel_reason != "disconnect":
                self._write(EndEvent(req.id, cancelled, stats).to_dict())
        except ProtocolError as exc:
            outcome = exc.code
            self._error_soon(req.id, exc)
        except ClientTooSlow:
            outcome = ErrorCode.CLIENT_TOO_SLOW
            if state.job is not None:
                state.job.cancel_pending()
            self._error_soon(
                req.id,
                ProtocolError(ErrorCode.CLIENT_TOO_SLOW, "the client stopped reading its audio"),
            )
        except (ConnectionError, OSError):
            outcome = "disconnect"
        except asyncio.CancelledError:
            outcome = "cancelled"
            if state.cancel_reason is None:
                raise
            if state.cancel_reason == "shutdown":
                self._error_soon(
                    req.id, ProtocolError(ErrorCode.SHUTTING_DOWN, "the daemon is shutting down")
                )
            elif state.cancel_reason != "disconnect":
                self._write(EndEvent(req.id, True, stats).to_dict())
        except Exception as exc:
            # A bug or a backend failure must end this request, not the daemon.
            log.exception("request %s failed", req.id)
            outcome = ErrorCode.INTERNAL
            self._error_soon(req.id, ProtocolError(ErrorCode.INTERNAL, f"{type(exc).__name__}"))
        finally:
            if state.job is not None:
                state.job.cancel_pending()
            reqlog.info(
                "conn=%d id=%d op=%s chars=%d result=%s ttfp_ms=%s audio_ms=%s rtf=%s",
                self.number,
                req.id,
                req.op,
                len(req.text),
                outcome,
                stats.get("ttfp_ms"),
                stats.get("audio_ms"),
                stats.get("rtf"),
            )
