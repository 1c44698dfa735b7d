"""ONNX Runtime sessions as the daemon makes and runs them: one shared CPU arena, the
options every session gets, and one run that a scheduler's token can stop.

Bounds: a run over more than :data:`SHRINK_ABOVE_FRAMES` latent frames or
:data:`SHRINK_ABOVE_IDS` phoneme ids gives the arena's free regions back when it ends, so
what a long request used does not stay.  Lifecycle: the arena is registered once per
process, at the first session; a session lives as long as the model that holds it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort

from appliance.model.engine import interrupt
from appliance.model.engine.base import BackendError
from appliance.speech import FloatArray


@functools.cache
def shared_cpu_arena() -> None:
    """Registers, once per process, the CPU arena every session of :func:`open_session`
    allocates from (``session.use_env_allocators``), growing by what a run asks, not by
    doubling.

    Each session's own arena kept what its largest runs below the shrinking bounds left in
    it (see :func:`run_session`), per session and per voice: the warm-up held +23 MB of
    arenas with the bundled voice and +33 MB with a second voice; one shared arena holds +7
    and +8 (``python -m bench.memprobe``, docs/speed.md).  Where buffers live changes no
    sample."""
    info = ort.OrtMemoryInfo(
        "Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT
    )
    # max_mem 0: no cap; arena_extend_strategy 1: kSameAsRequested; defaults for the rest.
    ort.create_and_register_allocator(info, ort.OrtArenaCfg(0, 1, -1, -1))


def open_session(
    path: Path,
    threads: int,
    spin: bool = False,
    pool_cpus: Sequence[int] = (),
    *,
    optimized_to: Path | None = None,
    optimize: bool = True,
) -> ort.InferenceSession:
    """``pool_cpus``: where the session's ``threads - 1`` pool threads run (see
    ``appliance.model.engine.threads.pinning``); empty: wherever the kernel puts them.
    ``optimized_to``: where ONNX Runtime writes the graph as it optimised it.  ``optimize``
    False: a graph optimised already (``appliance.model.engine.blocked``) runs as it is."""
    shared_cpu_arena()
    opts = ort.SessionOptions()
    opts.add_session_config_entry("session.use_env_allocators", "1")
    opts.intra_op_num_threads = max(1, threads)
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = (
        ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        if optimize
        else ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    )
    if optimized_to is not None:
        opts.optimized_model_filepath = str(optimized_to)
        # Not its warning that such a graph suits only this machine: it is made for this one.
        opts.log_severity_level = 3
    # A memory pattern is cached per distinct input shape, for ever: with the
    # phoneme count and the window width changing every request, the daemon grew
    # by ~2.5 MB per 1 000 requests.  Off, runs are as fast here (the arena still
    # reuses buffers) and memory stays where warm-up left it.
    opts.enable_mem_pattern = False
    # Spin-waiting between the graph's many small ops cuts a short encode by a third
    # (22 vs 27 ms here), but spinning threads steal cores: only when the threads of
    # all workers together do not oversubscribe the CPUs.
    opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    if threads > 1 and len(pool_cpus) == threads - 1:
        affinities = ";".join(str(cpu + 1) for cpu in pool_cpus)  # ONNX Runtime counts from 1
        opts.add_session_config_entry("session.intra_op_thread_affinities", affinities)
    return ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])


SHRINK_ABOVE_FRAMES = 64
"""A flow or decoder run over more latent frames than this gives its arena's free regions
back when it ends (see :func:`run_session`): a decoder window of 256 frames held +34 MB per
decoder for good.  A first packet's windows (at most 34 frames and their context) leave
the arena as it is, and the next request's first packet, after a long run shrank it, cost
the same CPU as after another first packet (136.5 against 135.0 ms on a loaded box, the
1-D decoder urgent; with ``intra_op_threads: 1`` the 2-D decoder serves both and paid
~4 ms more)."""

SHRINK_ABOVE_IDS = 256
"""The same for a prior (or encoder) run over more phoneme ids: a first clause of a few
sentences stays; 1 024 ids (``engine.max_phonemes``) held +66 MB for good."""


def run_session(
    session: ort.InferenceSession, feeds: dict[str, np.ndarray], what: str, shrink: bool = False
) -> list[np.ndarray]:
    """One session run; stoppable when the scheduler gave this thread a token.

    ``shrink``: the session's arena gives back its free regions when the run ends.  ONNX
    Runtime's arena grows by doubling to a run's largest buffers and keeps them for good:
    the warm-up's and long requests' runs held ~80 MB of an idle daemon.  Regions of a
    megabyte or more are mapped on their own (``appliance.ops.memory.MMAP_THRESHOLD``), so
    they go back to the kernel at once; the next long run maps them again (~0.4 % CPU on
    a clause: ``python -m bench.memprobe --ab arena_shrink``)."""
    token = interrupt.current()
    opts = ort.RunOptions()
    if shrink:
        opts.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    try:
        if token is None:
            outs: list[np.ndarray] = session.run(None, feeds, opts)
            return outs
        # ONNX Runtime checks the flag between nodes: the run ends within a node's time.
        with token.hooked(lambda: setattr(opts, "terminate", True)):
            outs = session.run(None, feeds, opts)
            return outs
    except interrupt.Interrupted:
        raise
    except Exception as exc:  # onnxruntime raises its own, unexported exception types
        if token is not None and token.stopped:
            raise interrupt.Interrupted(what) from exc
        raise BackendError(f"{what} failed: {exc}") from exc


def zeros(session: ort.InferenceSession, name: str) -> FloatArray:
    """Zeros for the input ``name``, one frame wide (its one dimension not fixed)."""
    return np.zeros(input_shape(session, name, 1), dtype=np.float32)


def input_shape(session: ort.InferenceSession, name: str, frames: int) -> list[int]:
    """The input ``name``'s shape for one utterance of ``frames`` frames: its last dimension
    (time), where not fixed, is ``frames``; any other not fixed (the batch) is 1."""
    shape = next(i.shape for i in session.get_inputs() if i.name == name)
    last = len(shape) - 1
    return [d if isinstance(d, int) else frames if k == last else 1 for k, d in enumerate(shape)]
