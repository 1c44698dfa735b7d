"""The utterances: waiting in speech-dispatcher's order, the one the callback holds, and
whether the player takes requests at all (its state); each one ended exactly once.

:class:`Lineup` owns the player's one lock, and everything under it: the
:class:`~appliance.playback.queue.SpeechQueue`, :attr:`Lineup.playing` and the state.

Threads: callers (the asyncio server, tests) :meth:`submit`, :meth:`cancel` and
:meth:`stop`; the audio thread calls only :meth:`take_next` and :meth:`finished_playing`,
which hold the lock for a few queue operations; :meth:`end` and :meth:`end_all` run on the
supervisor thread or the closing caller, never on the audio thread (they resolve futures).
Bounds: what a client queues is bounded by the service's admission, not here.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable

from appliance.playback.queue import Priority, SpeechQueue
from appliance.playback.utterance import Utterance
from appliance.speech import VOLUME, within

# How an ending counts in ``stats``.
_COUNTED_AS = {"done": "played", "closed": "cancelled", "device_lost": "interrupted"}


class NoAudioDevice(RuntimeError):
    """Playback is off or the device is lost; the server answers ``no_audio_device``."""


class Lineup:
    """The queue, the speaking utterance and the state, under one lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: SpeechQueue[Utterance] = SpeechQueue()
        self.playing: Utterance | None = None
        """The utterance the audio thread reads (written by it, under the lock)."""
        self.state = "off"
        self.why = "not opened"
        self._counts = {"played": 0, "cancelled": 0, "interrupted": 0, "dropped": 0}

    def set_state(self, state: str, why: str) -> None:
        with self._lock:
            self.state = state
            self.why = why

    # --- callers ----------------------------------------------------------------------------

    def submit(
        self,
        priority: str,
        volume: float,
        sample_rate: int,
        out_rate: int | None,
        client_key: Hashable,
    ) -> Utterance:
        """See ``Player.submit``; ``out_rate`` is the device's (None: no stream yet)."""
        prio = Priority(priority)
        if not within("volume", volume):
            raise ValueError(f"volume {volume!r} is outside {VOLUME[0]:g}..{VOLUME[1]:g}")
        if sample_rate <= 0:
            raise ValueError(f"sample rate {sample_rate!r}")
        if self.state != "ok" or out_rate is None:
            raise NoAudioDevice(self.why or "playback is off")
        utt = Utterance(prio, volume, sample_rate, out_rate, client_key, self.cancel)
        to_end: list[tuple[Utterance, str]] = []
        with self._lock:
            if self.state != "ok":
                raise NoAudioDevice(self.why)
            adm = self._queue.submit(utt, prio)
            if adm.cut is not None:
                adm.cut._cut_reason = "interrupted"
            to_end += [(d, "dropped") for d in adm.dropped]
            if not adm.accepted:
                to_end.append((utt, "dropped"))
            utt.position = adm.position
        for u, reason in to_end:
            self.end(u, reason)
        return utt

    def cuts(self, priority: str) -> bool:
        with self._lock:
            return self.state == "ok" and self._queue.cuts(priority)

    def cancel(self, utt: Utterance) -> None:
        """``Utterance.cancel``: fade it out if speaking, else drop it."""
        with self._lock:
            if self._queue.current is utt or self.playing is utt:
                if utt._cut_reason is None:
                    utt._cut_reason = "cancelled"
                self._queue.finished(utt)
                return
            removed = self._queue.remove(utt)
        if removed:
            self.end(utt, "cancelled")

    def stop(self, client_key: Hashable) -> int:
        """See ``Player.stop``."""
        with self._lock:
            n = 0
            cur = self._queue.current
            if cur is not None and cur.client_key == client_key:
                cur._cut_reason = "cancelled"
                self._queue.cut_current()
                n += 1
            removed = self._queue.remove_where(lambda u: u.client_key == client_key)
        for u in removed:
            self.end(u, "cancelled")
        return n + len(removed)

    # --- the audio thread -------------------------------------------------------------------

    def take_next(self) -> Utterance | None:
        """The next utterance to play, now :attr:`playing` (None: nothing waits)."""
        with self._lock:
            self.playing = self._queue.next()
            return self.playing

    def finished_playing(self, utt: Utterance) -> None:
        """The callback let go of ``utt`` (its end is delivered by the supervisor)."""
        with self._lock:
            self._queue.finished(utt)
            self.playing = None

    # --- endings (never the audio thread) ---------------------------------------------------

    def end(self, utt: Utterance, reason: str) -> None:
        """End an utterance the audio thread does not hold (safe from any other thread)."""
        if utt.end_info is not None:
            return
        utt._resolve_end(reason)
        key = _COUNTED_AS.get(reason, reason)
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + 1

    def end_all(self, reason: str) -> None:
        """End everything queued or held with ``reason`` (the stream is stopped, so the
        callback holds nothing any more)."""
        with self._lock:
            ended = self._queue.clear()
            playing, self.playing = self.playing, None
        if playing is not None and playing not in ended:
            ended.append(playing)
        for utt in ended:
            self.end(utt, reason)

    def counts(self) -> dict[str, int | bool]:
        """How many ended which way, how many wait, whether one speaks (for ``stats``)."""
        with self._lock:
            return {
                **self._counts,
                "queued": len(self._queue),
                "speaking": self._queue.current is not None,
            }
