"""The ``ttsd-playback`` thread: delivers the callback's events, watches the stream, reopens.

Every :data:`SUPERVISE_S` (or at once when the audio thread or PortAudio wakes it) the
supervisor delivers what the callback reported, then looks at the stream: one that
PortAudio stopped, that is no longer active or that stopped calling back is *lost* (the
player goes ``degraded`` and ends what it held); a player without a running stream is
reopened with back-off, from ``playback.reopen_min_s`` doubling to ``reopen_max_s``.

Threads: :meth:`Supervisor.start` and :meth:`Supervisor.join` run on the player's
caller; everything else runs on the supervisor thread, which is the only one to open a
stream once it has started.  Lifecycle: started once by ``Player.start``, ended by the
player's ``closing`` event (``join`` waits for it).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Protocol

from appliance.ops.config import PlaybackConfig
from appliance.playback.device import OutputDevice, device_problem

log = logging.getLogger(__name__)

# How often the supervisor looks at the stream when nothing wakes it.
SUPERVISE_S = 0.1


class Supervised(Protocol):
    """What the supervisor asks of the player (``Player`` provides it)."""

    @property
    def state(self) -> str: ...

    def deliver_events(self) -> None:
        """Resolve what the audio callback reported (this thread only)."""

    def device_lost(self, reason: str) -> None:
        """Go ``degraded``, close the stream and end every utterance ``device_lost``."""

    def reopen(self) -> None:
        """Open the stream again (rescanning devices) and go ``ok``; raises on failure."""

    def still_off(self, why: str) -> None:
        """Say ``why`` while the player is ``off`` (``degraded`` keeps what was lost)."""


class Backoff:
    """When to try the device again, and whether a failure is news worth an INFO line."""

    def __init__(self, cfg: PlaybackConfig) -> None:
        self._cfg = cfg
        self.delay_s = cfg.reopen_min_s
        self.next_at = 0.0
        self._last_failure = ""

    def reset(self) -> None:
        """The device ran (or was just lost): the next try comes soon."""
        self.delay_s = self._cfg.reopen_min_s
        self.next_at = time.monotonic() + self.delay_s

    def succeeded(self) -> None:
        """The device runs again: a later loss starts from the shortest delay."""
        self.delay_s = self._cfg.reopen_min_s

    def failed(self, why: str) -> bool:
        """One more failure; True when it should be said: once on the way up, and only
        when it is news (a box without a speaker should not fill the journal)."""
        at_max = self.delay_s >= self._cfg.reopen_max_s
        self.delay_s = min(self.delay_s * 2, self._cfg.reopen_max_s)
        self.next_at = time.monotonic() + self.delay_s
        news = not at_max and why != self._last_failure
        self._last_failure = why
        return news

    def first_failure(self, why: str) -> None:
        """The device did not open at start-up (already said): try again after the delay."""
        self._last_failure = why
        self.next_at = time.monotonic() + self.delay_s


class Supervisor:
    """The thread, its back-off and its counters (``device_losses``, ``reopens``).  It
    watches ``device`` and wakes on the device's events (``wake``, ``closing``)."""

    def __init__(self, player: Supervised, device: OutputDevice) -> None:
        self._player = player
        self._device = device
        self.backoff = Backoff(device.cfg)
        self.device_losses = 0
        self.reopens = 0
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="ttsd-playback", daemon=True)
        self._thread.start()

    def join(self, timeout_s: float) -> None:
        """Wait for the thread once ``closing`` is set (and the supervisor woken)."""
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)

    # --- the supervisor thread --------------------------------------------------------------

    def _run(self) -> None:
        device = self._device
        while not device.closing.is_set():
            device.wake.wait(SUPERVISE_S)
            device.wake.clear()
            if device.closing.is_set():
                break
            self._player.deliver_events()
            now = time.monotonic()
            if self._player.state == "ok":
                reason = device.trouble(now)
                if reason is not None:
                    self._lost(reason)
            elif now >= self.backoff.next_at:
                self._try_reopen()

    def _lost(self, reason: str) -> None:
        log.warning("playback: audio device lost (%s); reopening in the background", reason)
        self.device_losses += 1
        self._player.device_lost(reason)
        self.backoff.reset()

    def _try_reopen(self) -> None:
        try:
            self._player.reopen()
        except Exception as exc:  # PortAudio/ALSA raise several kinds
            why = device_problem(exc, self._device.cfg.device)
            news = self.backoff.failed(why)
            self._player.still_off(why)
            log.log(
                logging.INFO if news else logging.DEBUG,
                "playback: still off: %s; next try in %.1f s",
                why,
                self.backoff.delay_s,
            )
            log.debug("playback: PortAudio said: %s", exc)
            return
        self.reopens += 1
        self.backoff.succeeded()
