"""The output device: one PortAudio stream at a time, opened, watched for loss, closed.

:class:`OutputDevice` opens a ``sounddevice.OutputStream`` in callback mode (mono when the
device takes it, raw hardware often wants stereo), starts it and returns once its
callbacks come steadily (:class:`~appliance.playback.flow.FlowWatch`); a stream that does
not run within :data:`START_S` is closed and an error raised.  :meth:`OutputDevice.trouble`
says why a running stream counts as lost: PortAudio stopped it, it is no longer active, or
it has not called back for :data:`STALL_S`.

Threads: ``open`` and ``close`` run on one thread at a time: the caller of
``Player.start`` first, then only the player's supervisor thread (and ``Player.close``
after it has joined that thread).  PortAudio's thread calls the finished callback, which
only sets :attr:`OutputDevice.lost` and wakes the supervisor.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from appliance.ops.config import PlaybackConfig
from appliance.playback.flow import FlowWatch

log = logging.getLogger(__name__)

# A running stream that has not called back for this long is treated as lost.  Generous:
# ALSA's pulse plugin can sit ~2 s before its first callbacks after opening.
STALL_S = 3.0
# A stream that does not run within this long after it was started is given up and
# reopened in the background.
START_S = 6.0

PICK_A_DEVICE = (
    "set playback.device to one that `python -m sounddevice` lists, or playback.enabled: false"
)

Callback = Callable[[Any, int, Any, Any], None]


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


def rescan_devices(sd: Any) -> None:
    """Re-initialise PortAudio, so devices and environment changed since it was initialised
    (a device that came back, a new PULSE_SERVER) are seen.  It stops every stream of the
    process: the player owns the only one, and has closed it.

    The one private call of sounddevice in ttsd, kept here alone: PortAudio enumerates
    devices once, in ``Pa_Initialize``, and sounddevice (0.5) has no public way to run it
    again; its maintainer's advice is these two functions (spatialaudio/python-sounddevice
    #125, #516), and PortAudio's hot-plug work is not in a release (PortAudio/portaudio#11).
    tests/playback/test_device.py fails if a sounddevice release drops them."""
    sd._terminate()
    sd._initialize()


@dataclass(frozen=True)
class StreamInfo:
    device: str
    sample_rate: int
    channels: int
    latency_s: float
    """The output latency PortAudio reports for the open stream."""
    blocksize: int


@dataclass(eq=False)
class OutputDevice:
    """The stream of ``cfg.device``; plain object, :meth:`open` does the I/O.  ``wake`` and
    ``closing`` are the player's events, shared with its supervisor."""

    cfg: PlaybackConfig
    sd: Any
    flow: FlowWatch
    wake: threading.Event
    closing: threading.Event
    _stream: Any = field(default=None, init=False)
    _generation: int = field(default=0, init=False)
    info: StreamInfo | None = field(default=None, init=False)
    """The last stream opened (kept for ``health`` after it is lost)."""
    lost: str | None = field(default=None, init=False)
    """Set by PortAudio's thread when the stream stopped by itself."""

    def open(
        self, callback: Callback, prepare: Callable[[int, float], None], *, rescan: bool
    ) -> StreamInfo:
        """Open, start and wait until the stream runs; raises what PortAudio raises, or
        RuntimeError when it stops or does not run within :data:`START_S`.  ``prepare``
        gets the rate and latency before the first callback can come; ``callback`` notes
        each call in the flow watch this device waits on."""
        if rescan:
            rescan_devices(self.sd)
        dev_info = self.sd.query_devices(self.cfg.device, "output")
        rate = int(self.cfg.sample_rate or dev_info["default_samplerate"])
        self._generation += 1
        stream = self._new_stream(dev_info, rate, callback, self._generation)
        info = StreamInfo(
            device=str(dev_info["name"]),
            sample_rate=rate,
            channels=stream.channels,
            latency_s=float(stream.latency),
            blocksize=int(stream.blocksize),
        )
        prepare(rate, info.latency_s)
        self.flow.reset(rate, info.latency_s, time.monotonic())
        self.lost = None
        self.info = info
        self._stream = stream
        started = time.monotonic()
        stream.start()
        self._wait_running(started)
        log.info(
            "playback: %s at %d Hz, %d ch, latency %s -> %.1f ms, running after %.2f s",
            info.device,
            rate,
            info.channels,
            self.cfg.latency,
            1000 * info.latency_s,
            time.monotonic() - started,
        )
        return info

    def _new_stream(self, dev_info: Any, rate: int, callback: Callback, generation: int) -> Any:
        sd, cfg = self.sd, self.cfg
        last_exc: Exception | None = None
        # Mono when the device takes it (pulse, dmix); raw hardware often wants stereo.
        for channels in (1, 2):
            if channels > dev_info["max_output_channels"]:
                break
            try:
                return sd.OutputStream(
                    device=cfg.device,
                    samplerate=rate,
                    channels=channels,
                    dtype="float32",
                    latency=cfg.latency,
                    blocksize=cfg.blocksize,
                    callback=callback,
                    finished_callback=lambda: self._on_finished(generation),
                )
            except sd.PortAudioError as exc:
                last_exc = exc
        raise last_exc or RuntimeError("device has no output channels")

    def _wait_running(self, started: float) -> None:
        """Until the callbacks come steadily; the stream is closed and an error raised when
        it stops or does not run within :data:`START_S`."""
        while not self.flow.wait_steady(0.02):
            lost = "closed" if self.closing.is_set() else self.lost
            if lost is None and time.monotonic() - started > START_S:
                lost = f"the output stream did not run within {START_S:g} s"
            if lost is not None:
                self.close()
                raise RuntimeError(lost)

    def _on_finished(self, generation: int) -> None:
        # PortAudio calls this when the stream stops, including after an error.
        if generation == self._generation and not self.closing.is_set():
            self.lost = "the output stream stopped"
            self.wake.set()

    def trouble(self, now: float) -> str | None:
        """Why the running stream counts as lost, or None."""
        if self.lost is not None:
            return self.lost
        stream = self._stream
        if stream is None:
            return None
        if not stream.active:
            return "the output stream is no longer active"
        silent = self.flow.silent_for(now)
        if silent > STALL_S:
            return f"no audio callback for {silent:.1f} s"
        return None

    def close(self) -> None:
        """Abort and close the stream, if one is open; never raises."""
        stream, self._stream = self._stream, None
        self._generation += 1  # its finished_callback is stale from here on
        if stream is None:
            return
        try:
            stream.abort()
            stream.close()
        except Exception as exc:  # a lost device may fail to close; move on
            log.debug("playback: closing the old stream failed: %s", exc)
