"""The audio callback: samples of the speaking utterance into PortAudio's buffer.

:class:`Renderer` is what PortAudio calls for every block.  It never logs, never blocks on
I/O, allocates nothing per block, and takes the lineup's lock only for a few queue
operations when one utterance gives way to the next or is cut
(:class:`~appliance.playback.lineup.Lineup`).  What it has to report
(an utterance started or ended, an error in the callback) goes into :attr:`Renderer.events`
for the supervisor thread to deliver, and the supervisor is woken.

Threads: :meth:`Renderer.callback` and everything it calls run on PortAudio's audio thread
only.  :meth:`Renderer.prepare` runs on the thread opening a stream, before it starts.
The counters are each written by the audio thread only and read whole by ``stats``.
Bounds: a cut fades out over at most ``playback.fade_ms``; one event per utterance start
and end, so the event deque holds at most a few per queued utterance.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from appliance.ops.config import PlaybackConfig
from appliance.playback.flow import FlowWatch
from appliance.playback.lineup import Lineup
from appliance.playback.rt import apply_audio_thread_priority
from appliance.playback.utterance import F32, Utterance

Event = tuple[str, Utterance | None, Any]
"""``("started", utt, None)``, ``("ended", utt, reason)`` or ``("error", None, exc)``."""


def fade_ramps(rate: int, fade_ms: float) -> list[F32]:
    """Linear fades of every length up to ``fade_ms``, made before a stream starts so the
    callback never allocates: ``ramps[k]`` goes from 1 towards 0 over k samples."""
    fade_frames = max(1, round(rate * fade_ms / 1000.0))
    return [np.zeros(0, np.float32)] + [
        np.linspace(1.0, 0.0, k, endpoint=False, dtype=np.float32)
        for k in range(1, fade_frames + 1)
    ]


class Renderer:
    """Fills output blocks from the queue's speaking utterance; owns what the callback owns."""

    def __init__(
        self,
        cfg: PlaybackConfig,
        lineup: Lineup,
        wake: threading.Event,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._cfg = cfg
        self._clock = clock
        self._lineup = lineup
        self._wake = wake
        self.flow = FlowWatch()
        self.events: deque[Event] = deque()
        self._fades: list[F32] = [np.zeros(0, np.float32)]
        self._rate = 1
        self._latency_s = 0.0
        self.callbacks = 0
        self.status_underflows = 0
        self.starved = 0
        self.paused = 0
        self.callback_errors = 0
        self.priority_applied = "not yet"

    def prepare(self, rate: int, latency_s: float) -> None:
        """A stream of ``rate`` Hz and ``latency_s`` is about to start (no callback runs)."""
        self._fades = fade_ramps(rate, self._cfg.fade_ms)
        self._rate, self._latency_s = rate, latency_s

    # --- the audio thread -------------------------------------------------------------------

    def callback(self, outdata: Any, frames: int, time_info: Any, status: Any) -> None:
        """PortAudio's stream callback: ``outdata`` is (frames, channels) float32."""
        now = self._clock()
        # A pause in the callbacks mid-utterance is a dry spell PortAudio may not flag:
        # through ALSA's pulse plugin an underrun inside the sound server is not reported
        # (on a busy box a test heard an SSML mark 1.9 s late with none counted, the
        # plugin's pause after a start, flow.py); every later sample is that late.
        paused = self.flow.paused(now)
        first = self.flow.note(now, frames)
        self.callbacks += 1
        if first:
            self.priority_applied = apply_audio_thread_priority(
                self._cfg.realtime_priority, self._cfg.nice
            )
        buf: F32 = outdata[:, 0]
        try:
            pos = self._fill(buf, frames, now, bool(status.output_underflow), paused)
        except Exception as exc:  # must not kill the stream; reported by the supervisor
            self.callback_errors += 1
            self._post(("error", None, exc))
            pos = 0
        buf[pos:] = 0.0
        if outdata.shape[1] > 1:
            outdata[:, 1:] = outdata[:, :1]

    def _fill(self, buf: F32, frames: int, now: float, underflow: bool, paused: bool) -> int:
        """Samples into ``buf[:frames]``, one utterance after another; how many."""
        lineup = self._lineup
        if underflow or paused:
            speaking = lineup.playing is not None and lineup.playing._started
            if underflow:
                self.status_underflows += 1
            elif speaking:
                self.paused += 1
            if speaking and lineup.playing is not None:
                lineup.playing.underruns += 1
        pos = 0
        while pos < frames:
            utt = lineup.playing
            if utt is None:
                utt = lineup.take_next()
                if utt is None:
                    break
            if utt._cut_reason is not None:
                pos += self._fade_out(utt, buf[pos:frames])
                self._finish_playing(utt, utt._cut_reason)
                continue
            input_done = utt._input_done  # read before reading samples: no race with finish()
            k = utt._read_into(buf[pos:frames])
            if k:
                if not utt._started:
                    self._mark_started(utt, now, pos)
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
                    self.starved += 1
                break
        return pos

    def _fade_out(self, utt: Utterance, dst: F32) -> int:
        """A cut: a short linear fade of what comes next (then silence); how many samples."""
        if not utt._started:
            return 0
        k = utt._read_into(dst[: len(self._fades) - 1])
        dst[:k] *= self._fades[k]
        return k

    def _mark_started(self, utt: Utterance, now: float, pos: int) -> None:
        utt._started = True
        utt.started_at = now
        # Request → this sample at the device: what is ahead of it in this block, plus
        # the output latency PortAudio reports.
        utt.latency_ms = 1000.0 * (now - utt.created + pos / self._rate + self._latency_s)
        self._post(("started", utt, None))

    def _finish_playing(self, utt: Utterance, reason: str) -> None:
        self._lineup.finished_playing(utt)
        self._post(("ended", utt, reason))

    def _post(self, event: Event) -> None:
        self.events.append(event)
        self._wake.set()
