"""Concurrency benchmark: many streams consumed in real time, and a long soak.

Each simulated client is a player: from its first chunk it plays audio at 1x
after a 100 ms jitter buffer, reads the socket only while its own buffer
holds less than ``client_buffer_s`` (so a slow daemon is never hidden by a
client that reads ahead), and counts a *stall* whenever a chunk arrives after
the audio before it has finished playing.  ``busy`` answers are honoured:
the client waits ``retry_after_ms`` and asks again.

    python -m bench.concurrency --socket PATH --pid PID [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from appliance.clients.client import decoder, encode
from appliance.ops.meter import KEEP_WARM
from bench.rig import wait_warm

TEXTS = (
    "The morning train was late again, so Anna walked along the river instead. "
    "The water was high after the rain, and the ducks had claimed the footpath.",
    "Please remember that the meeting has moved to Thursday afternoon. "
    "Bring the budget figures, and ask Tom whether the new printer has arrived.",
    "At the top of the hill there is a small stone chapel. "
    "Nobody knows who built it, but every spring someone paints the door blue.",
    "Turn left at the second light, then keep going until you see the bakery. "
    "The entrance to the car park is just behind it, on the right.",
)

_JITTER_S = 0.1

SWEEP_LEVELS = (1, 2, 4, 8, 12, 16)
"""Concurrent streams per sweep level (issue 15 asks for 12 between 8 and 16)."""


class StreamConnection:
    """One raw protocol connection that reads only when asked to (for back-pressure)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self._unpacker = decoder()
        self._ids = itertools.count(1)

    @classmethod
    async def open(cls, socket_path: str) -> StreamConnection:
        reader, writer = await asyncio.open_unix_connection(socket_path, limit=1 << 16)
        return cls(reader, writer)

    def next_id(self) -> int:
        return next(self._ids)

    async def send(self, msg: dict[str, Any]) -> None:
        self.writer.write(encode(msg))
        await self.writer.drain()

    async def recv(self) -> dict[str, Any] | None:
        """The next event; None when the daemon closed the connection."""
        while True:
            for msg in self._unpacker:
                if isinstance(msg, dict):
                    return msg
            try:
                data = await self.reader.read(1 << 16)
            except (ConnectionError, OSError):
                return None
            if not data:
                return None
            self._unpacker.feed(data)

    async def call(self, op: str, **fields: Any) -> dict[str, Any]:
        rid = self.next_id()
        await self.send({"op": op, "id": rid, **fields})
        while True:
            ev = await self.recv()
            if ev is None:
                raise ConnectionError("daemon closed the connection")
            if ev.get("id") == rid:
                return ev

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass


@dataclass
class StreamResult:
    """One request as its client saw it."""

    outcome: str  # "end", "cancelled", "busy" or an error code
    ttfp_ms: float | None = None
    stalls: int = 0
    stall_ms: float = 0.0
    audio_s: float = 0.0
    server_stalls: int = 0
    retry_after_ms: int | None = None
    wall_s: float = 0.0


@dataclass
class _Player:
    """Client-side playback clock with a jitter buffer; counts underruns."""

    jitter_s: float = _JITTER_S
    start: float | None = None
    received_s: float = 0.0
    shift_s: float = 0.0  # time playback was paused by stalls
    stalls: int = 0

    def arrive(self, now: float, duration_s: float) -> None:
        if self.start is None:
            self.start = now + self.jitter_s
        else:
            needed_at = self.start + self.shift_s + self.received_s
            if now > needed_at:
                self.stalls += 1
                self.shift_s += now - needed_at
        self.received_s += duration_s

    def buffered_s(self, now: float) -> float:
        if self.start is None:
            return 0.0
        return self.start + self.shift_s + self.received_s - now

    def finish_at(self) -> float:
        return (self.start or 0.0) + self.shift_s + self.received_s


async def consume_realtime(
    conn: StreamConnection,
    text: str,
    *,
    client_buffer_s: float = 2.0,
    cancel_after_chunks: int | None = None,
    play_out: bool = True,
    **opts: Any,
) -> StreamResult:
    """Synthesize ``text`` and consume it like a player at 1x; returns what the client saw."""
    rid = conn.next_id()
    t0 = time.monotonic()
    await conn.send({"op": "synthesize", "id": rid, "text": text, **opts})
    player = _Player()
    res = StreamResult("error")
    chunks = 0
    while True:
        ev = await conn.recv()
        if ev is None:
            res.outcome = "disconnected"
            break
        if ev.get("id") != rid:
            continue
        kind = ev.get("event")
        now = time.monotonic()
        if kind == "chunk":
            if res.ttfp_ms is None:
                res.ttfp_ms = (now - t0) * 1000.0
            player.arrive(now, float(ev["duration_ms"]) / 1000.0)
            chunks += 1
            if cancel_after_chunks is not None and chunks == cancel_after_chunks:
                await conn.send({"op": "cancel", "id": conn.next_id(), "target": rid})
            # Read on only when the player has room: a real-time consumer.
            ahead = player.buffered_s(time.monotonic()) - client_buffer_s
            if ahead > 0:
                await asyncio.sleep(ahead)
        elif kind == "end":
            res.outcome = "cancelled" if ev.get("cancelled") else "end"
            res.server_stalls = int((ev.get("stats") or {}).get("stalls") or 0)
            break
        elif kind == "error":
            res.outcome = "busy" if ev.get("code") == "busy" else str(ev.get("code"))
            if ev.get("retry_after_ms") is not None:
                res.retry_after_ms = int(ev["retry_after_ms"])
            break
    if play_out and player.start is not None:
        # The player is still playing what it holds; the next request waits for it.
        await asyncio.sleep(max(0.0, player.finish_at() - time.monotonic()))
    res.stalls = player.stalls
    res.stall_ms = player.shift_s * 1000.0
    res.audio_s = player.received_s
    res.wall_s = time.monotonic() - t0
    return res


# ------------------------------------------------------------------ RSS sampling


class RssSampler:
    """Samples a process's resident set size in the background; keeps the peak."""

    def __init__(self, pid: int, every_s: float = 0.2) -> None:
        self.proc = psutil.Process(pid)
        self.every_s = every_s
        self.peak = self.proc.memory_info().rss
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            self.peak = max(self.peak, self.proc.memory_info().rss)
            await asyncio.sleep(self.every_s)

    def __enter__(self) -> RssSampler:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
        self.peak = max(self.peak, self.proc.memory_info().rss)


# ------------------------------------------------------------------ the sweep


@dataclass
class LevelResult:
    streams: int
    requests: int = 0
    ttfp_ms: list[float] = field(default_factory=list)
    stalls: int = 0
    server_stalls: int = 0
    busy: int = 0
    errors: int = 0
    audio_s: float = 0.0
    wall_s: float = 0.0
    peak_rss_mb: float = 0.0
    model_cpu: dict[str, float] = field(default_factory=dict)
    """CPU seconds of the model's runs per second of audio produced, by part
    (:func:`model_cpu_per_audio_s`)."""

    def row(self) -> dict[str, Any]:
        t = sorted(self.ttfp_ms)
        return {
            "streams": self.streams,
            "requests": self.requests,
            "ttfp_p50_ms": _pct(t, 50),
            "ttfp_p95_ms": _pct(t, 95),
            "ttfp_p99_ms": _pct(t, 99),
            "stalls": self.stalls,
            "server_stalls": self.server_stalls,
            "busy": self.busy,
            "errors": self.errors,
            "x_realtime": round(self.audio_s / self.wall_s, 2) if self.wall_s > 0 else 0.0,
            "peak_rss_mb": round(self.peak_rss_mb, 1),
            "model_cpu_per_audio_s": self.model_cpu,
            "ttfp_samples": [round(x, 1) for x in self.ttfp_ms],
        }


def _pct(sorted_values: Sequence[float], q: float) -> float | None:
    if not sorted_values:
        return None
    k = min(len(sorted_values) - 1, max(0, round(q / 100.0 * (len(sorted_values) - 1))))
    return round(sorted_values[k], 1)


async def _client_loop(
    socket_path: str, until: float, level: LevelResult, texts: Iterator[str], stagger_s: float
) -> None:
    await asyncio.sleep(stagger_s)
    conn = await StreamConnection.open(socket_path)
    try:
        while time.monotonic() < until:
            res = await consume_realtime(conn, next(texts))
            if res.outcome == "busy":
                level.busy += 1
                await asyncio.sleep((res.retry_after_ms or 500) / 1000.0)
                continue
            if res.outcome != "end":
                level.errors += 1
                continue
            level.requests += 1
            if res.ttfp_ms is not None:
                level.ttfp_ms.append(res.ttfp_ms)
            level.stalls += res.stalls
            level.server_stalls += res.server_stalls
            level.audio_s += res.audio_s
    finally:
        await conn.close()


async def _stats(socket_path: str) -> dict[str, Any]:
    conn = await StreamConnection.open(socket_path)
    try:
        return await conn.call("stats")
    finally:
        await conn.close()


def model_cpu_per_audio_s(before: dict[str, Any], after: dict[str, Any]) -> dict[str, float]:
    """The model's CPU per second of audio the daemon produced between two ``stats``, by
    part (``stats.model_runs``; the calling threads' CPU: see appliance.ops.meter) and
    in all for the requests (``model``: the keep-warm touches, the daemon's own, are their
    own part and not in it).  Empty when no audio was produced."""
    audio_s = (after["counters"]["audio_ms"] - before["counters"]["audio_ms"]) / 1000.0
    if audio_s <= 0:
        return {}
    was = before.get("model_runs", {})
    out = {
        part: round((cost["cpu_s"] - was.get(part, {}).get("cpu_s", 0.0)) / audio_s, 4)
        for part, cost in after.get("model_runs", {}).items()
    }
    out["model"] = round(sum(v for part, v in out.items() if part != KEEP_WARM), 4)
    return out


async def _sweep_level(socket_path: str, n: int, duration_s: float, pid: int | None) -> LevelResult:
    level = LevelResult(n)
    before = await _stats(socket_path)
    rng = random.Random(n)
    texts = itertools.cycle(TEXTS)
    t0 = time.monotonic()
    until = t0 + duration_s
    sampler = RssSampler(pid) if pid else None
    clients = [
        _client_loop(socket_path, until, level, texts, rng.uniform(0.0, 1.0)) for _ in range(n)
    ]
    if sampler is not None:
        with sampler:
            await asyncio.gather(*clients)
        level.peak_rss_mb = sampler.peak / 1e6
    else:
        await asyncio.gather(*clients)
    level.wall_s = time.monotonic() - t0
    # Every client has had its last request's end: the audio counter has all of it.
    level.model_cpu = model_cpu_per_audio_s(before, await _stats(socket_path))
    return level


async def _unpaced(socket_path: str, text: str) -> StreamResult:
    """One request on its own connection, read as fast as it comes."""
    conn = await StreamConnection.open(socket_path)
    try:
        return await consume_realtime(conn, text, play_out=False, client_buffer_s=1e9)
    finally:
        await conn.close()


async def _warm(socket_path: str) -> None:
    """The daemon's whole warm-up done, then one request (its real-time factor measured).

    The warm-up's later clauses run as batch work once the daemon listens: a level
    measured meanwhile counts their CPU against its audio (one stream read 0.11 CPU
    seconds per second of audio beside them, 0.06 after)."""
    await asyncio.to_thread(wait_warm, socket_path)
    await _unpaced(socket_path, TEXTS[0])


def run_sweep(
    socket_path: str,
    levels: Sequence[int] = SWEEP_LEVELS,
    duration_s: float = 30.0,
    pid: int | None = None,
) -> list[dict[str, Any]]:
    """Each level: ``n`` clients back to back for ``duration_s``; one row per level."""

    async def go() -> list[dict[str, Any]]:
        await _warm(socket_path)
        rows = []
        for n in levels:
            rows.append((await _sweep_level(socket_path, n, duration_s, pid)).row())
            await asyncio.sleep(1.0)  # let the last streams drain before the next level
        return rows

    return asyncio.run(go())


class CpuHogs:
    """``n`` busy loops (``yes`` into /dev/null) for the length of a ``with`` block: the
    other work a box runs beside the daemon."""

    def __init__(self, n: int) -> None:
        self.n = n
        self._procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> CpuHogs:
        self._procs = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(self.n)]
        return self

    def __exit__(self, *exc: object) -> None:
        for p in self._procs:
            p.kill()
        for p in self._procs:
            p.wait(10)
        self._procs = []


def run_beside_hogs(
    socket_path: str,
    streams: int = 32,
    hogs: int | None = None,
    duration_s: float = 30.0,
    pid: int | None = None,
) -> dict[str, Any]:
    """One sweep level beside ``hogs`` CPU hogs (default: one per core), as
    :func:`run_sweep`'s row with ``hogs`` added (docs/scheduling.md, "Admission beside
    other work")."""
    n = hogs if hogs is not None else (os.cpu_count() or 1)
    with CpuHogs(n):
        row = run_sweep(socket_path, [streams], duration_s, pid)[0]
    row["hogs"] = n
    return row


# ------------------------------------------------------------------ a newcomer under load


def run_newcomer(
    socket_path: str, streams: int = 4, rounds: int = 4, per_round: int = 6
) -> dict[str, Any]:
    """TTFP of a short request alone, and while ``streams`` long streams play in real time.

    Each round: 3 short requests on an idle daemon, then ``streams`` streams of
    about 24 s of audio each, and after 3 s (past their start-up burst)
    ``per_round`` short requests 0.3 s apart.
    """
    text = "Turn left at the second light, then keep going until you see the bakery."
    long_text = " ".join(TEXTS[:2]) * 2

    async def go() -> dict[str, Any]:
        await _warm(socket_path)
        idle: list[float] = []
        busy: list[float] = []
        refused = 0
        for _ in range(rounds):
            for _ in range(3):
                res = await _unpaced(socket_path, text)
                if res.ttfp_ms is not None:
                    idle.append(res.ttfp_ms)
            conns = [await StreamConnection.open(socket_path) for _ in range(streams)]
            running = [asyncio.ensure_future(consume_realtime(c, long_text)) for c in conns]
            await asyncio.sleep(3.0)
            for _ in range(per_round):
                res = await _unpaced(socket_path, text)
                if res.outcome == "busy":
                    refused += 1
                elif res.ttfp_ms is not None:
                    busy.append(res.ttfp_ms)
                await asyncio.sleep(0.3)
            await asyncio.gather(*running)
            for c in conns:
                await c.close()
        idle.sort()
        busy.sort()
        return {
            "streams": streams,
            "idle_p50_ms": _pct(idle, 50),
            "idle_max_ms": _pct(idle, 100),
            "busy_p50_ms": _pct(busy, 50),
            "busy_p95_ms": _pct(busy, 95),
            "busy_max_ms": _pct(busy, 100),
            "newcomers": len(busy),
            "refused_busy": refused,
        }

    return asyncio.run(go())


def format_newcomer(nc: dict[str, Any]) -> str:
    return (
        f"Newcomer TTFP with {nc['streams']} streams playing: P50 {nc['busy_p50_ms']} ms, "
        f"P95 {nc['busy_p95_ms']}, max {nc['busy_max_ms']} ({nc['newcomers']} requests, "
        f"{nc['refused_busy']} told busy); idle P50 {nc['idle_p50_ms']} ms, max {nc['idle_max_ms']}"
    )


# ------------------------------------------------------------------ the soak


def run_soak(
    socket_path: str,
    n: int = 10000,
    sample_every: int = 1000,
    pid: int = 0,
    concurrency: int = 4,
) -> dict[str, Any]:
    """``n`` short requests, ``concurrency`` at a time, read as fast as they come; every 10th is
    cancelled after its first chunk and every 25th drops its connection mid-stream.  The
    daemon's RSS is sampled every ``sample_every`` requests."""
    proc = psutil.Process(pid)

    async def go() -> dict[str, Any]:
        counter = itertools.count()
        samples: list[tuple[int, float]] = [(0, proc.memory_info().rss / 1e6)]
        outcomes: dict[str, int] = {}
        t0 = time.monotonic()

        async def worker() -> None:
            conn = await StreamConnection.open(socket_path)
            try:
                while (k := next(counter)) < n:
                    # Short commands: the soak is about per-request memory, so many
                    # requests per minute matter more than long ones.
                    words = TEXTS[k % len(TEXTS)].split()[: 2 + k % 5]
                    text = f"Request {k}: " + " ".join(words) + "."
                    if k % 25 == 24:
                        await conn.send(
                            {
                                "op": "synthesize",
                                "id": conn.next_id(),
                                "text": text,
                                "realtime": False,
                            }
                        )
                        await conn.recv()
                        await conn.close()
                        conn = await StreamConnection.open(socket_path)
                        outcome = "dropped"
                    else:
                        res = await consume_realtime(
                            conn,
                            text,
                            client_buffer_s=1e9,
                            play_out=False,
                            cancel_after_chunks=1 if k % 10 == 9 else None,
                            # Batch class: read as fast as they come, these are not real-time
                            # listeners, and admission rightly refuses them as such.
                            realtime=False,
                        )
                        outcome = res.outcome
                    outcomes[outcome] = outcomes.get(outcome, 0) + 1
                    if (k + 1) % sample_every == 0:
                        samples.append((k + 1, proc.memory_info().rss / 1e6))
            finally:
                await conn.close()

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        samples.sort()
        first_after_warm = samples[1][1] if len(samples) > 1 else samples[0][1]
        return {
            "requests": n,
            "wall_s": round(time.monotonic() - t0, 1),
            "rss_mb": [(k, round(v, 1)) for k, v in samples],
            "growth_mb": round(samples[-1][1] - samples[0][1], 1),
            "growth_after_first_sample_mb": round(samples[-1][1] - first_after_warm, 1),
            "outcomes": outcomes,
        }

    return asyncio.run(go())


# ------------------------------------------------------------------ output


def plot_ttfp(results: Sequence[dict[str, Any]], path: str | Path) -> None:
    """Box plot of the TTFP samples of each concurrency level (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in results if r.get("ttfp_samples")]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.boxplot(
        [r["ttfp_samples"] for r in rows],
        tick_labels=[str(r["streams"]) for r in rows],
        whis=(5, 95),
        showfliers=True,
    )
    ax.axhline(150, linestyle="--", linewidth=1, label="P95 target 150 ms")
    ax.set_xlabel("concurrent real-time streams")
    ax.set_ylabel("time to first chunk (ms)")
    ax.set_title("TTFP per concurrency level (whiskers: P5-P95)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(str(path), dpi=120)
    plt.close(fig)


def format_table(results: Sequence[dict[str, Any]]) -> str:
    head = (
        f"{'streams':>7} {'reqs':>5} {'P50 ms':>7} {'P95 ms':>7} {'P99 ms':>7} "
        f"{'stalls':>6} {'busy':>5} {'x RT':>6} {'peak RSS MB':>11} {'model CPU/s':>11}"
    )
    lines = [head]
    for r in results:
        cpu = r.get("model_cpu_per_audio_s", {}).get("model")
        lines.append(
            f"{r['streams']:>7} {r['requests']:>5} {_f(r['ttfp_p50_ms']):>7} "
            f"{_f(r['ttfp_p95_ms']):>7} {_f(r['ttfp_p99_ms']):>7} {r['stalls']:>6} "
            f"{r['busy']:>5} {r['x_realtime']:>6} {r['peak_rss_mb']:>11} "
            f"{'-' if cpu is None else f'{cpu:.3f}':>11}"
        )
    return "\n".join(lines)


def format_model_cpu(results: Sequence[dict[str, Any]]) -> str:
    """Where a second of audio's model CPU goes, by part, for each level."""
    parts = sorted({p for r in results for p in r.get("model_cpu_per_audio_s", {})} - {"model"})
    lines = [f"{'streams':>7} " + " ".join(f"{p:>14}" for p in parts) + f" {'model':>7}"]
    for r in results:
        cpu = r.get("model_cpu_per_audio_s", {})
        cells = " ".join(f"{_g(cpu.get(p)):>14}" for p in parts)
        lines.append(f"{r['streams']:>7} {cells} {_g(cpu.get('model')):>7}")
    return "\n".join(lines)


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}"


def _g(x: float | None) -> str:
    return "-" if x is None else f"{x:.4f}"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--socket", required=True)
    ap.add_argument("--pid", type=int, required=True, help="the daemon's pid (for RSS)")
    ap.add_argument("--quick", action="store_true", help="short levels and a 1000-request soak")
    ap.add_argument("--levels", default=",".join(map(str, SWEEP_LEVELS)))
    ap.add_argument("--duration", type=float, default=None, help="seconds per level")
    ap.add_argument("--soak", type=int, default=None, help="soak requests (0: no soak)")
    ap.add_argument("--out", default="bench-out", help="directory for the PNG and JSON")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    levels = [int(x) for x in args.levels.split(",") if x]
    duration = args.duration or (12.0 if args.quick else 30.0)
    results = run_sweep(args.socket, levels, duration, args.pid)
    print(format_table(results))
    png = out / "ttfp_by_concurrency.png"
    plot_ttfp(results, png)
    print(f"TTFP plot: {png}")
    newcomer = run_newcomer(args.socket)
    print(format_newcomer(newcomer))
    report: dict[str, Any] = {"sweep": results, "newcomer": newcomer}
    n_soak = args.soak if args.soak is not None else (1000 if args.quick else 10000)
    if n_soak:
        soak = run_soak(args.socket, n_soak, max(1, n_soak // 10), args.pid)
        report["soak"] = soak
        print(f"soak: {n_soak} requests in {soak['wall_s']} s, RSS growth {soak['growth_mb']} MB")
        print("RSS samples (requests, MB): " + json.dumps(soak["rss_mb"]))
    (out / "bench_concurrency.json").write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


def scheduler_cost(items: int = 4000, workers: int = 2) -> dict[str, float]:
    """The scheduler's own cost per work item (issue 46, goal 4), in process: ``items``
    empty items through a :class:`~appliance.core.scheduler.Scheduler` of ``workers``, one
    at a time (each awaited: a stream's windows) and all at once (a crowd's).  CPU is the
    process's, all threads (the loop's submit and wake-up, the worker's pop and hand-back);
    set beside a window's decode (~8 ms of CPU for a first chunk here)."""
    from appliance.core.admission import process_cpu_s
    from appliance.core.scheduler import Scheduler

    def nothing() -> None:
        return None

    async def run(sched: Scheduler, together: bool) -> tuple[float, float]:
        def submit() -> asyncio.Future[Any]:
            return sched.submit(
                nothing, deadline=time.monotonic(), realtime=True, owner=sched, kind="decode"
            )

        cpu0, t0 = process_cpu_s(), time.perf_counter()
        if together:
            await asyncio.gather(*(submit() for _ in range(items)))
        else:
            for _ in range(items):
                await submit()
        return process_cpu_s() - cpu0, time.perf_counter() - t0

    sched = Scheduler(workers, name="bench")
    sched.start()
    try:
        asyncio.run(run(sched, False))  # warm
        cpu1, wall1 = asyncio.run(run(sched, False))
        cpu_n, _ = asyncio.run(run(sched, True))
    finally:
        sched.stop()
    return {
        "items": items,
        "cpu_us_one_at_a_time": cpu1 / items * 1e6,
        "round_trip_us": wall1 / items * 1e6,
        "cpu_us_all_at_once": cpu_n / items * 1e6,
    }


def format_scheduler_cost(c: dict[str, float]) -> str:
    return (
        f"Scheduler's own cost per work item ({c['items']:.0f} empty items, in process): "
        f"{c['cpu_us_one_at_a_time']:.0f} µs of CPU one at a time (round trip "
        f"{c['round_trip_us']:.0f} µs), {c['cpu_us_all_at_once']:.0f} µs all at once — against "
        "~8 000 µs of CPU for a first chunk's decode window."
    )
