"""Whether the output stream's callbacks come steadily: the start-up wait and the stall watch.

ALSA's pulse plugin calls back a few times at start to fill its buffer, then may sit ~1.9 s
before it calls back steadily; a request queued in that pause waits for it.  So a stream
counts as *running* only once its callbacks have asked for :data:`STEADY_MIN_S` of audio
(and four times its latency at least) without a pause longer than twice its latency.

The pause is the sound server's, measured on PulseAudio 16's null sink (the tests'): while
no client asks it for a shorter latency it renders blocks of up to 2 s, and a stream that
connects waits for its next wake.  An underrun restarts the plugin's stream, so it pauses
again (a 30 ms stall in the callback: ~1.97 s).  With another client holding the sink at
10 ms neither pause came.  A hardware sink was not measured.

Threads: :meth:`FlowWatch.note` runs on PortAudio's audio thread, once per callback, and
never blocks; :meth:`FlowWatch.reset` runs on the thread opening a stream, before it is
started (no callback runs then); the readers run on any thread: they read floats and ints
the audio thread writes whole.
"""

from __future__ import annotations

import threading

# A stream runs once its callbacks have asked for this much audio without a pause (and
# four times its latency at least): ALSA's pulse plugin calls back five times at start to
# fill its buffer (25 ms at a 20 ms latency, spread out when the CPU is busy), then sits
# ~1.9 s before it calls back steadily; a request queued in that pause waited for it
# (first speak 0.4-1.6 s late).
STEADY_MIN_S = 0.1
FLOWING_GAP_S = 0.5
"""``health`` says ``flowing`` while the last callback is more recent than this."""


class FlowWatch:
    """The callbacks' rhythm: when the last came, and whether the current run is steady."""

    def __init__(self) -> None:
        self.last_callback = 0.0
        self.flowing_since: float | None = None
        self._run_frames = 0
        self._steady_frames = 0
        self._gap_s = STEADY_MIN_S
        self._steady = threading.Event()

    def reset(self, rate: int, latency_s: float, now: float) -> None:
        """A stream of ``rate`` Hz and ``latency_s`` is about to start (opener's thread)."""
        self.flowing_since = None
        self.last_callback = now
        self._run_frames = 0
        self._steady_frames = round(rate * max(STEADY_MIN_S, 4.0 * latency_s))
        self._gap_s = max(STEADY_MIN_S, 2.0 * latency_s)
        self._steady.clear()

    def note(self, now: float, frames: int) -> bool:
        """One callback asking for ``frames`` (audio thread); True on the stream's first."""
        if now - self.last_callback > self._gap_s:
            self._run_frames = 0  # a pause: the steady run starts again here
        self._run_frames += frames
        if self._run_frames >= self._steady_frames and not self._steady.is_set():
            self._steady.set()
        self.last_callback = now
        if self.flowing_since is not None:
            return False
        self.flowing_since = now
        return True

    def wait_steady(self, timeout_s: float) -> bool:
        """Until the stream has once run steadily since :meth:`reset`, or ``timeout_s``."""
        return self._steady.wait(timeout_s)

    def paused(self, now: float) -> bool:
        """Whether the callback arriving ``now`` comes after a pause (read before
        :meth:`note`): the device asked for nothing for longer than twice its latency."""
        return self.flowing_since is not None and now - self.last_callback > self._gap_s

    def steady_now(self, now: float) -> bool:
        """Whether the callbacks come steadily *now* (an underrun restarts the run)."""
        return self._run_frames >= self._steady_frames and now - self.last_callback < self._gap_s

    def silent_for(self, now: float) -> float:
        """Seconds since the last callback."""
        return now - self.last_callback

    def flowing(self, now: float) -> bool:
        """Called back at all since :meth:`reset`, and recently."""
        return self.flowing_since is not None and now - self.last_callback < FLOWING_GAP_S
