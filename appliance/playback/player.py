"""The speaker: one PortAudio output stream kept running, fed by a priority queue.

``Player.open(cfg)`` opens ONE ``sounddevice.OutputStream`` in callback mode at start-up and
keeps it running (silence when idle), so no device opening stands between a request and its
first sound.  Requests become :class:`Utterance` objects ordered by
:class:`~appliance.playback.queue.SpeechQueue` (speech-dispatcher's priorities).

Threads:

* the PortAudio callback (``_callback``) copies samples of the speaking utterance into the
  device buffer.  It never logs, never blocks on I/O, allocates nothing per block, and takes
  the player lock only for a few dictionary operations when one utterance gives way to the
  next or is cut.  What it has to report goes into a deque for the supervisor;
* the supervisor thread (``ttsd-playback``) delivers those events to waiters, logs, and
  watches the stream: a PortAudio error, a stream that finished by itself or stopped calling
  back marks the player *degraded*; it then reopens the device with back-off while
  :meth:`Player.submit` raises :class:`NoAudioDevice`;
* callers (the asyncio server) submit, cancel and stop under the player lock.

States: ``starting`` (being opened: the daemon does it beside loading its voices), ``ok``
(the stream runs: its callbacks come steadily), ``degraded`` (lost, being reopened), ``off``
(no device, being retried; or disabled).  ``submit`` takes requests only in ``ok``.
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

from appliance.ops.config import PlaybackConfig
from appliance.playback import alsa
from appliance.playback.queue import Priority, SpeechQueue
from appliance.playback.rt import apply_audio_thread_priority
from appliance.playback.utterance import F32, Utterance

log = logging.getLogger(__name__)

# A running stream that has not called back for this long is treated as lost.  Generous:
# ALSA's pulse plugin can sit ~2 s before its first callbacks after opening.
STALL_S = 3.0
# A stream runs once its callbacks have asked for this much audio without a pause (and
# four times its latency at least): ALSA's pulse plugin calls back five times at start to
# fill its buffer (25 ms at a 20 ms latency, spread out when the CPU is busy), then sits
# ~1.9 s before it calls back steadily; a request queued in that pause waited for it
# (first speak 0.4-1.6 s late).
STEADY_MIN_S = 0.1
# A stream that does not run within this long after it was started is given up and
# reopened in the background.
START_S = 6.0
# How often the supervisor looks at the stream when nothing wakes it.
SUPERVISE_S = 0.1


class NoAudioDevice(RuntimeError):
    """Playback is off or the device is lost; the server answers ``no_audio_device``."""


PICK_A_DEVICE = (
    "set playback.device to one that `python -m sounddevice` lists, or playback.enabled: false"
)


def device_problem(exc: Exception, device: str | int | None) -> str:
    """Why the output device cannot be opened, in a user's terms: PortAudio says "Error
    querying device -1" for a box with no output device at all (issue 42)."""
    text = str(exc)
    if isinstance(exc, ValueError) or "Error querying device" in text:
        if device is None:
            return f"no audio output device found ({PICK_A_DEVICE})"
        return f"audio output device {device!r} not found ({PICK_A_DEVICE})"
    if "Device unavailable" in text or "Device or resource busy" in text:
        return f"the audio output device is busy (used by another program?); {text}"
    return f"the audio output device cannot be opened: {text}"


@dataclass(frozen=True)
class StreamInfo:
    device: str
    sample_rate: int
    channels: int
    latency_s: float
    """The output latency PortAudio reports for the open stream."""
    blocksize: int


class Player:
    """Plain object; :meth:`open` does the I/O.  Thread-safe public methods."""

    def __init__(self, cfg: PlaybackConfig) -> None:
        self.cfg = cfg
        self._sd: Any = None
        self._lock = threading.Lock()
        self._queue: SpeechQueue[Utterance] = SpeechQueue()
        self._state = "off"
        self._why = "not opened"
        self._retry = False
        self._stream: Any = None
        self._info: StreamInfo | None = None
        self._generation = 0
        self._lost: str | None = None  # set by PortAudio threads, read by the supervisor
        # Callback-owned.
        self._playing: Utterance | None = None
        self._first_call = True
        self._last_callback = 0.0
        self._run_frames = 0
        self._steady_frames = 0
        self._steady_gap_s = STEADY_MIN_S
        self._steady = threading.Event()
        self._flowing_since: float | None = None
        self._fades: list[F32] = []
        self._events: deque[tuple[str, Utterance | None, Any]] = deque()
        # Counters (each written by one thread only).
        self._callbacks = 0
        self._status_underflows = 0
        self._starved = 0
        self._callback_errors = 0
        self._counts = {"played": 0, "cancelled": 0, "interrupted": 0, "dropped": 0}
        self._device_losses = 0
        self._reopens = 0
        self._priority_applied = "not yet"
        self._alsa: alsa.AlsaMessages | None = None
        self._last_failure = ""
        # Supervisor.
        self._wake = threading.Event()
        self._closing = False
        self._thread: threading.Thread | None = None
        self._backoff = cfg.reopen_min_s
        self._next_attempt = 0.0

    # --- loading ----------------------------------------------------------------------------

    @classmethod
    def open(cls, cfg: PlaybackConfig, *, rescan: bool = False) -> Player:
        """A player, started (:meth:`start`): blocking, never raises for a missing device.

        ``rescan`` re-initialises PortAudio first, so devices and environment changed since
        ``sounddevice`` was imported are seen (tests; a daemon that imported it early).
        It stops every other PortAudio stream of the process: one player per process.
        """
        player = cls(cfg)
        player.start(rescan=rescan)
        return player

    def starting(self) -> None:
        """Say ``starting`` until :meth:`start` has run (the daemon opens the device beside
        loading its voices): ``submit`` refuses with "the audio device is starting"."""
        if self.cfg.enabled and self._state == "off":
            with self._lock:
                self._state = "starting"
                self._why = "the audio device is starting"

    def start(self, *, rescan: bool = False) -> None:
        """Open the output device, play silence, and return once it runs: its callbacks
        come steadily, so the first request is as quick as any other.  Never raises for a
        missing device: the player comes up ``off`` with a warning and keeps retrying."""
        if not self.cfg.enabled:
            self._set_state("off", "disabled in the configuration")
            log.info("playback: off (%s)", self._why)
            return
        # Before PortAudio loads ALSA: its messages go to the log, not the terminal.
        self._alsa = alsa.messages()
        try:
            self._sd = importlib.import_module("sounddevice")
        except OSError as exc:  # libportaudio2 missing: nothing to retry
            self._set_state("off", f"PortAudio not available: {exc}")
            log.warning("playback: off (%s)", self._why)
            return
        self._retry = True
        try:
            self._open_stream(rescan=rescan)
        except Exception as exc:  # PortAudio/ALSA raise several kinds
            self._set_state("off", device_problem(exc, self.cfg.device))
            self._last_failure = self._why
            self._next_attempt = time.monotonic() + self._backoff
            log.warning("playback: off: %s; trying again in the background", self._why)
            log.debug("playback: PortAudio said: %s", exc)
        if self._closing:
            return  # closed while it was being opened (the daemon stopped at start-up)
        self._thread = threading.Thread(target=self._supervise, name="ttsd-playback", daemon=True)
        self._thread.start()

    def wait_running(self, timeout_s: float = START_S) -> bool:
        """Until the stream calls back steadily *now*; False when it is not ``ok`` or not
        steady within ``timeout_s``.  After an underrun (a busy start-up: a voice being
        cut) ALSA's pulse plugin restarts the stream and sits ~1.9 s again, so the daemon
        asks this once more just before it says it is ready."""
        deadline = time.monotonic() + timeout_s
        while self._state == "ok":
            if (
                self._run_frames >= self._steady_frames
                and time.monotonic() - self._last_callback < self._steady_gap_s
            ):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return False

    def _set_state(self, state: str, why: str) -> None:
        with self._lock:
            self._state = state
            self._why = why

    def _open_stream(self, rescan: bool) -> None:
        sd = self._sd
        if rescan:
            # PortAudio enumerates devices once at initialisation; a device that came back
            # (or a new PULSE_SERVER/ALSA setup) is only seen after re-initialising.  Safe:
            # the player owns the only stream of this process and it is closed here.
            sd._terminate()
            sd._initialize()
        cfg = self.cfg
        dev_info = sd.query_devices(cfg.device, "output")
        rate = int(cfg.sample_rate or dev_info["default_samplerate"])
        self._generation += 1
        gen = self._generation
        stream = None
        last_exc: Exception | None = None
        # Mono when the device takes it (pulse, dmix); raw hardware often wants stereo.
        for channels in (1, 2):
            if channels > dev_info["max_output_channels"]:
                break
            try:
                stream = sd.OutputStream(
                    device=cfg.device,
                    samplerate=rate,
                    channels=channels,
                    dtype="float32",
                    latency=cfg.latency,
                    blocksize=cfg.blocksize,
                    callback=self._callback,
                    finished_callback=lambda: self._on_finished(gen),
                )
                break
            except sd.PortAudioError as exc:
                last_exc = exc
        if stream is None:
            raise last_exc or RuntimeError("device has no output channels")
        fade_frames = max(1, round(rate * cfg.fade_ms / 1000.0))
        # Linear fades of every length up to fade_ms, made here so the callback never
        # allocates: fades[k] ramps from 1 towards 0 over k samples.
        self._fades = [np.zeros(0, np.float32)] + [
            np.linspace(1.0, 0.0, k, endpoint=False, dtype=np.float32)
            for k in range(1, fade_frames + 1)
        ]
        self._first_call = True
        self._flowing_since = None
        self._last_callback = time.monotonic()
        self._run_frames = 0
        self._steady_frames = round(rate * max(STEADY_MIN_S, 4.0 * float(stream.latency)))
        self._steady_gap_s = max(STEADY_MIN_S, 2.0 * float(stream.latency))
        self._steady.clear()
        self._lost = None
        self._info = StreamInfo(
            device=str(dev_info["name"]),
            sample_rate=rate,
            channels=stream.channels,
            latency_s=float(stream.latency),
            blocksize=int(stream.blocksize),
        )
        self._stream = stream
        started = time.monotonic()
        stream.start()
        self._wait_running(started)
        self._set_state("ok", "")
        log.info(
            "playback: %s at %d Hz, %d ch, latency %s -> %.1f ms, running after %.2f s",
            self._info.device,
            rate,
            self._info.channels,
            cfg.latency,
            1000 * self._info.latency_s,
            time.monotonic() - started,
        )

    def _wait_running(self, started: float) -> None:
        """Until the callbacks come steadily; the stream is closed and an error raised when
        it stops or does not run within :data:`START_S`."""
        while not self._steady.wait(0.02):
            lost = "closed" if self._closing else self._lost
            if lost is None and time.monotonic() - started > START_S:
                lost = f"the output stream did not run within {START_S:g} s"
            if lost is not None:
                self._close_stream()
                raise RuntimeError(lost)

    def close(self) -> None:
        """Stop the stream and the supervisor; every pending utterance ends ``closed``."""
        self._closing = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._close_stream()
        with self._lock:
            self._state = "off"
            self._why = "closed"
            ended = self._take_all()
        for utt in ended:
            self._end(utt, "closed")
        self._deliver_events()

    def __enter__(self) -> Player:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- requests ---------------------------------------------------------------------------

    @property
    def sample_rate(self) -> int | None:
        return self._info.sample_rate if self._info else None

    def submit(
        self, priority: str, volume: float, sample_rate: int, client_key: Hashable
    ) -> Utterance:
        """Queue a request.  Raises :class:`NoAudioDevice` when playback is off or degraded,
        ``ValueError`` for an unknown priority or a bad volume/rate.

        Call from the event loop (the utterance binds it for ``wait_*``) or any thread.
        A request refused by its priority (a notification while something speaks) comes
        back already ended with reason ``dropped``.
        """
        prio = Priority(priority)
        if not 0.0 <= volume <= 2.0:
            raise ValueError(f"volume {volume!r} is outside 0..2")
        if sample_rate <= 0:
            raise ValueError(f"sample rate {sample_rate!r}")
        info = self._info
        if self._state != "ok" or info is None:
            raise NoAudioDevice(self._why or "playback is off")
        utt = Utterance(prio, volume, sample_rate, info.sample_rate, client_key, self._cancel)
        to_end: list[tuple[Utterance, str]] = []
        with self._lock:
            if self._state != "ok":
                raise NoAudioDevice(self._why)
            adm = self._queue.submit(utt, prio)
            if adm.cut is not None:
                adm.cut._cut_reason = "interrupted"
            to_end += [(d, "dropped") for d in adm.dropped]
            if not adm.accepted:
                to_end.append((utt, "dropped"))
            utt.position = adm.position
        for u, reason in to_end:
            self._end(u, reason)
        return utt

    def cuts(self, priority: str) -> bool:
        """Whether a request of ``priority`` submitted now would cut what is speaking (the
        service admits such a ``speak`` in that speech's place: appliance.core.service)."""
        with self._lock:
            return self._state == "ok" and self._queue.cuts(priority)

    def _cancel(self, utt: Utterance) -> None:
        with self._lock:
            if self._queue.current is utt or self._playing is utt:
                if utt._cut_reason is None:
                    utt._cut_reason = "cancelled"
                self._queue.finished(utt)
                return
            removed = self._queue.remove(utt)
        if removed:
            self._end(utt, "cancelled")

    def stop(self, client_key: Hashable) -> int:
        """Stop everything of one client: the speaking one fades out within one callback,
        waiting ones are dropped.  Returns how many were stopped."""
        with self._lock:
            n = 0
            cur = self._queue.current
            if cur is not None and cur.client_key == client_key:
                cur._cut_reason = "cancelled"
                self._queue.cut_current()
                n += 1
            removed = self._queue.remove_where(lambda u: u.client_key == client_key)
        for u in removed:
            self._end(u, "cancelled")
        return n + len(removed)

    def _end(self, utt: Utterance, reason: str) -> None:
        """End an utterance the audio thread does not hold (safe from any other thread)."""
        if utt.end_info is not None:
            return
        utt._resolve_end(reason)
        key = {"done": "played", "closed": "cancelled", "device_lost": "interrupted"}.get(
            reason, reason
        )
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + 1

    # --- the audio callback -----------------------------------------------------------------

    def _callback(self, outdata: Any, frames: int, time_info: Any, status: Any) -> None:
        now = time.monotonic()
        if now - self._last_callback > self._steady_gap_s:
            self._run_frames = 0  # a pause: the steady run starts again here
        self._run_frames += frames
        if self._run_frames >= self._steady_frames and not self._steady.is_set():
            self._steady.set()
        self._last_callback = now
        self._callbacks += 1
        if self._first_call:
            self._first_call = False
            self._flowing_since = now
            self._priority_applied = apply_audio_thread_priority(
                self.cfg.realtime_priority, self.cfg.nice
            )
        buf: F32 = outdata[:, 0]
        try:
            pos = self._fill(buf, frames, now, bool(status.output_underflow))
        except Exception as exc:  # must not kill the stream; reported later
            self._callback_errors += 1
            self._events.append(("error", None, exc))
            self._wake.set()
            pos = 0
        buf[pos:] = 0.0
        if outdata.shape[1] > 1:
            outdata[:, 1:] = outdata[:, :1]

    def _fill(self, buf: F32, frames: int, now: float, underflow: bool) -> int:
        info = self._info
        assert info is not None
        if underflow:
            self._status_underflows += 1
            if self._playing is not None and self._playing._started:
                self._playing.underruns += 1
        pos = 0
        while pos < frames:
            utt = self._playing
            if utt is None:
                with self._lock:
                    utt = self._playing = self._queue.next()
                if utt is None:
                    break
            if utt._cut_reason is not None:
                # Cut: a short linear fade of what comes next, then silence.
                k = 0
                if utt._started:
                    k = utt._read_into(buf[pos : pos + min(len(self._fades) - 1, frames - pos)])
                    buf[pos : pos + k] *= self._fades[k]
                pos += k
                self._finish_playing(utt, utt._cut_reason)
                continue
            input_done = utt._input_done  # read before reading samples: no race with finish()
            k = utt._read_into(buf[pos:frames])
            if k:
                if not utt._started:
                    utt._started = True
                    utt.started_at = now
                    utt.latency_ms = 1000.0 * (
                        now - utt.created + pos / info.sample_rate + info.latency_s
                    )
                    self._events.append(("started", utt, None))
                    self._wake.set()
                utt._starving = False
                pos += k
            if pos < frames:
                if input_done:
                    self._finish_playing(utt, "done")
                    continue  # the next one starts in this same block: no gap
                if utt._started and not utt._starving:
                    # Mid-utterance with nothing to play: the producer fell behind.
                    utt._starving = True
                    utt.underruns += 1
                    self._starved += 1
                break
        return pos

    def _finish_playing(self, utt: Utterance, reason: str) -> None:
        with self._lock:
            self._queue.finished(utt)
            self._playing = None
        self._events.append(("ended", utt, reason))
        self._wake.set()

    def _on_finished(self, generation: int) -> None:
        # PortAudio calls this when the stream stops, including after an error.
        if generation == self._generation and not self._closing:
            self._lost = "the output stream stopped"
            self._wake.set()

    # --- supervisor -------------------------------------------------------------------------

    def _supervise(self) -> None:
        while not self._closing:
            self._wake.wait(SUPERVISE_S)
            self._wake.clear()
            if self._closing:
                break
            self._deliver_events()
            now = time.monotonic()
            if self._state == "ok":
                reason = self._lost
                stream = self._stream
                if reason is None and stream is not None:
                    if not stream.active:
                        reason = "the output stream is no longer active"
                    elif now - self._last_callback > STALL_S:
                        reason = f"no audio callback for {now - self._last_callback:.1f} s"
                if reason is not None:
                    self._device_lost(reason)
            elif self._retry and now >= self._next_attempt:
                self._try_reopen()

    def _deliver_events(self) -> None:
        if self._alsa is not None:
            for line in self._alsa.drain():
                log.debug("playback: ALSA: %s", line)
        while self._events:
            kind, utt, arg = self._events.popleft()
            if kind == "started" and utt is not None:
                utt._resolve_started()
            elif kind == "ended" and utt is not None:
                self._end(utt, str(arg))
            elif kind == "error":
                log.error("playback: error in the audio callback: %r", arg)

    def _device_lost(self, reason: str) -> None:
        log.warning("playback: audio device lost (%s); reopening in the background", reason)
        self._device_losses += 1
        self._set_state("degraded", f"audio device lost: {reason}")
        self._close_stream()
        self._deliver_events()
        with self._lock:
            ended = self._take_all()
        for utt in ended:
            self._end(utt, "device_lost")
        self._backoff = self.cfg.reopen_min_s
        self._next_attempt = time.monotonic() + self._backoff

    def _try_reopen(self) -> None:
        try:
            self._open_stream(rescan=True)
        except Exception as exc:  # PortAudio/ALSA raise several kinds
            at_max = self._backoff >= self.cfg.reopen_max_s
            self._backoff = min(self._backoff * 2, self.cfg.reopen_max_s)
            self._next_attempt = time.monotonic() + self._backoff
            why = device_problem(exc, self.cfg.device)
            # Said once on the way up, and only when it is news: a box without a speaker
            # should not fill the journal (or make run's terminal) with the same line.
            news = not at_max and why != self._last_failure
            self._last_failure = why
            if self._state == "off":  # degraded keeps saying what was lost
                self._set_state("off", why)
            log.log(
                logging.INFO if news else logging.DEBUG,
                "playback: still off: %s; next try in %.1f s",
                why,
                self._backoff,
            )
            log.debug("playback: PortAudio said: %s", exc)
            return
        self._reopens += 1
        self._backoff = self.cfg.reopen_min_s

    def _close_stream(self) -> None:
        stream, self._stream = self._stream, None
        self._generation += 1  # its finished_callback is stale from here on
        if stream is None:
            return
        try:
            stream.abort()
            stream.close()
        except Exception as exc:  # a lost device may fail to close; move on
            log.debug("playback: closing the old stream failed: %s", exc)

    def _take_all(self) -> list[Utterance]:
        """Empty the queue (lock held; stream stopped so the callback holds nothing)."""
        out = self._queue.clear()
        if self._playing is not None and self._playing not in out:
            out.append(self._playing)
        self._playing = None
        return out

    # --- reporting --------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        with self._lock:
            counts = dict(self._counts)
            queued = len(self._queue)
            speaking = self._queue.current is not None
        return {
            "underruns": self._status_underflows + self._starved,
            "status_underflows": self._status_underflows,
            "starved": self._starved,
            "callbacks": self._callbacks,
            "callback_errors": self._callback_errors,
            "device_losses": self._device_losses,
            "reopens": self._reopens,
            "alsa_messages": self._alsa.count if self._alsa is not None else 0,
            "queued": queued,
            "speaking": speaking,
            **counts,
        }

    def health(self) -> dict[str, Any]:
        info = self._info
        now = time.monotonic()
        flowing = (
            self._state == "ok"
            and self._flowing_since is not None
            and now - self._last_callback < 0.5
        )
        return {
            "state": self._state,
            "reason": self._why,
            "device": info.device if info else None,
            "sample_rate": info.sample_rate if info else None,
            "channels": info.channels if info else None,
            "latency_setting": self.cfg.latency,
            "latency_ms": round(1000 * info.latency_s, 2) if info else None,
            "blocksize": info.blocksize if info else None,
            "flowing": flowing,
            "priority": self._priority_applied,
            "underruns": self._status_underflows + self._starved,
        }
