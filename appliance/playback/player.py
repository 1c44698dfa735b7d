"""The speaker: one PortAudio output stream kept running, fed by a priority queue.

``Player.open(cfg)`` opens ONE ``sounddevice.OutputStream`` in callback mode at start-up and
keeps it running (silence when idle), so no device opening stands between a request and its
first sound.  Requests become :class:`Utterance` objects ordered by
:class:`~appliance.playback.queue.SpeechQueue` (speech-dispatcher's priorities).

The player is the front: it starts and closes the parts, each of which runs on one thread:

* :class:`~appliance.playback.render.Renderer` is the PortAudio callback (the audio
  thread): it copies samples of the speaking utterance into the device buffer and reports
  starts and ends through a deque;
* :class:`~appliance.playback.supervisor.Supervisor` is the ``ttsd-playback`` thread: it
  delivers those events (:meth:`Player.deliver_events`), watches the stream, marks the
  player *degraded* when it is lost and reopens it with back-off;
* :class:`~appliance.playback.device.OutputDevice` opens and closes the stream, on the
  thread of :meth:`Player.start` and then only on the supervisor's;
* callers (the asyncio server) submit, cancel and stop through
  :class:`~appliance.playback.lineup.Lineup`, which holds the queue and the state under one lock.

States: ``starting`` (being opened: the daemon does it beside loading its voices), ``ok``
(the stream runs: its callbacks come steadily), ``degraded`` (lost, being reopened), ``off``
(no device, being retried; or disabled).  ``submit`` takes requests only in ``ok``.
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from collections.abc import Hashable
from typing import Any

from appliance.ops.config import PlaybackConfig
from appliance.playback import alsa
from appliance.playback.device import START_S, OutputDevice, StreamInfo, device_problem
from appliance.playback.lineup import Lineup, NoAudioDevice
from appliance.playback.render import Renderer
from appliance.playback.supervisor import Supervisor
from appliance.playback.utterance import Utterance

__all__ = ["NoAudioDevice", "Player", "StreamInfo"]

log = logging.getLogger(__name__)


class Player:
    """Plain object; :meth:`open` does the I/O.  Thread-safe public methods."""

    def __init__(self, cfg: PlaybackConfig) -> None:
        self.cfg = cfg
        self._lineup = Lineup()
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._render = Renderer(cfg, self._lineup, self._wake)
        self._device: OutputDevice | None = None  # once sounddevice is loaded
        self._supervisor: Supervisor | None = None
        self._alsa: alsa.AlsaMessages | None = None

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
        if self.cfg.enabled and self._lineup.state == "off":
            self._lineup.set_state("starting", "the audio device is starting")

    def start(self, *, rescan: bool = False) -> None:
        """Open the output device, play silence, and return once it runs: its callbacks
        come steadily, so the first request is as quick as any other.  Never raises for a
        missing device: the player comes up ``off`` with a warning and keeps retrying."""
        if not self.cfg.enabled:
            self._lineup.set_state("off", "disabled in the configuration")
            log.info("playback: off (%s)", self._lineup.why)
            return
        # Before PortAudio loads ALSA: its messages go to the log, not the terminal.
        self._alsa = alsa.messages()
        try:
            sd = importlib.import_module("sounddevice")
        except OSError as exc:  # libportaudio2 missing: nothing to retry
            self._lineup.set_state("off", f"PortAudio not available: {exc}")
            log.warning("playback: off (%s)", self._lineup.why)
            return
        device = OutputDevice(self.cfg, sd, self._render.flow, self._wake, self._closing)
        self._device = device
        supervisor = Supervisor(self, device)
        self._supervisor = supervisor
        try:
            self._open_stream(rescan=rescan)
        except Exception as exc:  # PortAudio/ALSA raise several kinds
            why = device_problem(exc, self.cfg.device)
            self._lineup.set_state("off", why)
            supervisor.backoff.first_failure(why)
            log.warning("playback: off: %s; trying again in the background", why)
            log.debug("playback: PortAudio said: %s", exc)
        if self._closing.is_set():
            return  # closed while it was being opened (the daemon stopped at start-up)
        supervisor.start()

    def wait_running(self, timeout_s: float = START_S) -> bool:
        """Until the stream calls back steadily *now*; False when it is not ``ok`` or not
        steady within ``timeout_s``.  After an underrun (a busy start-up: a voice being
        cut) ALSA's pulse plugin restarts the stream and sits ~1.9 s again, so the daemon
        asks this once more just before it says it is ready."""
        deadline = time.monotonic() + timeout_s
        while self._lineup.state == "ok":
            if self._render.flow.steady_now(time.monotonic()):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return False

    def _open_stream(self, rescan: bool) -> None:
        assert self._device is not None
        self._device.open(self._render.callback, self._render.prepare, rescan=rescan)
        self._lineup.set_state("ok", "")

    def close(self) -> None:
        """Stop the stream and the supervisor; every pending utterance ends ``closed``."""
        self._closing.set()
        self._wake.set()
        if self._supervisor is not None:
            self._supervisor.join(timeout_s=5)
        if self._device is not None:
            self._device.close()
        self._lineup.set_state("off", "closed")
        self.deliver_events()
        self._lineup.end_all("closed")

    def __enter__(self) -> Player:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- what the supervisor asks (its thread) ----------------------------------------------

    @property
    def state(self) -> str:
        return self._lineup.state

    def deliver_events(self) -> None:
        """Resolve what the audio callback reported; log ALSA's messages."""
        if self._alsa is not None:
            for line in self._alsa.drain():
                log.debug("playback: ALSA: %s", line)
        events = self._render.events
        while events:
            kind, utt, arg = events.popleft()
            if kind == "started" and utt is not None:
                utt._resolve_started()
            elif kind == "ended" and utt is not None:
                self._lineup.end(utt, str(arg))
            elif kind == "error":
                log.error("playback: error in the audio callback: %r", arg)

    def device_lost(self, reason: str) -> None:
        self._lineup.set_state("degraded", f"audio device lost: {reason}")
        if self._device is not None:
            self._device.close()
        self.deliver_events()
        self._lineup.end_all("device_lost")

    def reopen(self) -> None:
        self._open_stream(rescan=True)

    def still_off(self, why: str) -> None:
        if self._lineup.state == "off":  # degraded keeps saying what was lost
            self._lineup.set_state("off", why)

    # --- requests ---------------------------------------------------------------------------

    @property
    def sample_rate(self) -> int | None:
        info = self._device.info if self._device is not None else None
        return info.sample_rate if info else None

    def submit(
        self, priority: str, volume: float, sample_rate: int, client_key: Hashable
    ) -> Utterance:
        """Queue a request.  Raises :class:`NoAudioDevice` when playback is off or degraded,
        ``ValueError`` for an unknown priority or a bad volume/rate.

        Call from the event loop (the utterance binds it for ``wait_*``) or any thread.
        A request refused by its priority (a notification while something speaks) comes
        back already ended with reason ``dropped``.
        """
        return self._lineup.submit(priority, volume, sample_rate, self.sample_rate, client_key)

    def cuts(self, priority: str) -> bool:
        """Whether a request of ``priority`` submitted now would cut what is speaking (the
        service admits such a ``speak`` in that speech's place: appliance.core.service)."""
        return self._lineup.cuts(priority)

    def stop(self, client_key: Hashable) -> int:
        """Stop everything of one client: the speaking one fades out within one callback,
        waiting ones are dropped.  Returns how many were stopped."""
        return self._lineup.stop(client_key)

    # --- reporting --------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        r, sup = self._render, self._supervisor
        return {
            "underruns": r.status_underflows + r.starved + r.paused,
            "status_underflows": r.status_underflows,
            "starved": r.starved,
            "paused": r.paused,
            "callbacks": r.callbacks,
            "callback_errors": r.callback_errors,
            "device_losses": sup.device_losses if sup is not None else 0,
            "reopens": sup.reopens if sup is not None else 0,
            "alsa_messages": self._alsa.count if self._alsa is not None else 0,
            **self._lineup.counts(),
        }

    def health(self) -> dict[str, Any]:
        info = self._device.info if self._device is not None else None
        r = self._render
        return {
            "state": self._lineup.state,
            "reason": self._lineup.why,
            "device": info.device if info else None,
            "sample_rate": info.sample_rate if info else None,
            "channels": info.channels if info else None,
            "latency_setting": self.cfg.latency,
            "latency_ms": round(1000 * info.latency_s, 2) if info else None,
            "blocksize": info.blocksize if info else None,
            "flowing": self._lineup.state == "ok" and r.flow.flowing(time.monotonic()),
            "priority": r.priority_applied,
            "underruns": r.status_underflows + r.starved + r.paused,
        }
