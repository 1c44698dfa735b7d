"""What the model's runs cost, by part: where the workers' time goes.

:class:`RunMeter` counts, for each part of a voice's model (``prior``, ``flow``,
``decoder``, ``encoder``, ``fused``; on TensorRT ``gpu_encoder``, ``gpu_decoder``), its
runs, the wall time they took, the CPU time of the thread that ran them, and the latent
frames they covered.  Divided by the audio
produced (``ttsd_audio_seconds_total``), these say what a second of speech costs and
which part it goes to: the figure goal 4 of issue 46 asks for (docs/scheduling.md,
"Where a stream's CPU goes").

The keep-warm touches (``engine.keep_warm_s``) count as one part of their own,
:data:`KEEP_WARM`, whichever parts of the model they run (:meth:`RunMeter.counted_as`):
what keeping warm costs, and a stream's cost without it.

The CPU time is the calling thread's (``time.thread_time``): a session with more than
one intra-op thread also runs on its pool threads, which this does not see, so ``cpu_s``
is a floor for a part whose session has more than one (the prior, the flow and the urgent
decoder, with one worker or two or more CPUs per worker: appliance.model.engine.threads)
and exact for one thread: the lean decoder always, every part with the default two
workers on 2 CPUs.  ``wall_s`` is the run's time on the clock, waits for a CPU included.

Threads: :meth:`RunMeter.timed` runs on whichever thread runs the model (the inference
workers, the warm-up); :meth:`RunMeter.snapshot` on any thread.  One lock, held for a few
additions.  Bounds: one entry per part name, a fixed set in the backends' code; the meter
lives as long as the runtime that made it and is shared by the runtimes a reload makes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

KEEP_WARM = "keep_warm"
"""The part the keep-warm touches count as (``engine.keep_warm_s``): the model's runs that
keep it warm between requests, apart from those of the requests (a stream's cost)."""


@dataclass
class PartCost:
    """What one part's runs cost so far."""

    runs: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    frames: int = 0

    def as_dict(self) -> dict[str, float | int]:
        return {
            "runs": self.runs,
            "wall_s": round(self.wall_s, 3),
            "cpu_s": round(self.cpu_s, 3),
            "frames": self.frames,
        }


@dataclass
class Run:
    """One run being timed: the caller may set its frames once they are known."""

    frames: int


class RunMeter:
    """The model's runs by part (see the module)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parts: dict[str, PartCost] = {}
        self._as = threading.local()
        """``part``: what the runs this thread times count as, where not their own."""

    @contextmanager
    def counted_as(self, part: str) -> Iterator[None]:
        """Every run this thread times inside counts as ``part``, whichever part of the
        model it is: the daemon's own runs (:data:`KEEP_WARM`), apart from the requests'."""
        before = getattr(self._as, "part", None)
        self._as.part = part
        try:
            yield
        finally:
            self._as.part = before

    @contextmanager
    def timed(self, part: str, frames: int = 0) -> Iterator[Run]:
        """Count one run of ``part`` covering ``frames`` latent frames, or what the caller
        sets on the :class:`Run` it gets once the run has said (a prior's frames).  A
        failed run counts too: its time was spent."""
        run = Run(frames)
        part = getattr(self._as, "part", None) or part
        cpu, wall = time.thread_time(), time.perf_counter()
        try:
            yield run
        finally:
            cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
            with self._lock:
                cost = self._parts.setdefault(part, PartCost())
                cost.runs += 1
                cost.wall_s += wall
                cost.cpu_s += cpu
                cost.frames += run.frames

    def snapshot(self) -> dict[str, PartCost]:
        """A copy of each part's cost, by part name."""
        with self._lock:
            return {name: PartCost(**vars(c)) for name, c in sorted(self._parts.items())}
