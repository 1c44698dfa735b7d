"""ONNX Runtime CPU backend: always loaded, always warm, the failover target."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import platform
import shutil
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import onnxruntime as ort

from appliance.model.engine import interrupt
from appliance.model.engine.base import (
    BackendError,
    Encoded,
    Scales,
    VoiceModel,
    Window,
    drop_margins,
)
from appliance.model.margins import MarginCrops, read_crops
from appliance.model.nchwc import keep_blocked
from appliance.model.noise import MEAN, STD, UNROUNDED, NoiseFeed, call_seed
from appliance.model.retime import respace, retime
from appliance.ops import atomic
from appliance.ops.logsetup import one_line
from appliance.ops.meter import RunMeter
from appliance.speech import FloatArray, IntArray
from appliance.voicetypes import CutNames, FlowSplit

log = logging.getLogger(__name__)


@functools.cache
def shared_cpu_arena() -> None:
    """Registers, once per process, the CPU arena every session of :func:`_session` allocates
    from (``session.use_env_allocators``), growing by what a run asks, not by doubling.

    Each session's own arena kept what its largest runs below the shrinking bounds left in it
    (see :func:`_run`), per session and per voice: the warm-up held +23 MB of arenas with the
    bundled voice and +33 MB with a second voice; one shared arena holds +7 and +8
    (``python -m bench.memprobe``, docs/speed.md).  Where buffers live changes no sample."""
    info = ort.OrtMemoryInfo(
        "Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT
    )
    # max_mem 0: no cap; arena_extend_strategy 1: kSameAsRequested; defaults for the rest.
    ort.create_and_register_allocator(info, ort.OrtArenaCfg(0, 1, -1, -1))


def _session(
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
    False: a graph optimised already (:func:`blocked_lean`) runs as it is."""
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


def blocked_lean(path: Path, cut: CutNames) -> tuple[ort.InferenceSession, str]:
    """The 2-D decoder on one thread with its element-wise operators kept in the blocked
    layout (:mod:`appliance.model.nchwc`): 4–7 % less CPU per window.  And which graph
    runs, in words.

    The graph is specific to this CPU and this ONNX Runtime, so it is made on the machine
    that runs it and kept beside ``path`` under a name that says both
    (:func:`_machine_key`); a later load uses it as it is.  Made, it is used only when, on
    a probe window, it gives the samples of the graph ONNX Runtime optimised, bit for bit;
    else that graph runs.  Making it costs the load ~80 ms and leaves ~12 MB of the
    process's heap behind (ONNX Runtime writing and both sessions), so it is done once per
    machine, not at every start: loading the kept file costs less than the plain graph."""
    kept = path.with_name(f"{path.stem}.blocked-{_machine_key(path)}.onnx")
    if kept.is_file():
        try:
            return _session(kept, 1, optimize=False), "blocked (made here before)"
        except Exception as exc:  # damaged or foreign: made again; ONNX Runtime's own types
            log.info("2-D decoder %s made again: %s", kept.name, one_line(exc))
    with tempfile.TemporaryDirectory(prefix="ttsd-nchwc-") as tmp:
        session, layout = _make_blocked(path, cut, Path(tmp))
        if layout.startswith("blocked"):
            _keep(Path(tmp, "blocked.onnx"), kept)
    return session, layout


def _make_blocked(path: Path, cut: CutNames, tmp: Path) -> tuple[ort.InferenceSession, str]:
    """The blocked graph made in ``tmp`` and checked against ONNX Runtime's (see above)."""
    import onnx

    optimised, rewritten = tmp / "optimised.onnx", tmp / "blocked.onnx"
    plain = _session(path, 1, optimized_to=optimised)
    try:
        model, saved = keep_blocked(onnx.load(str(optimised)))
        onnx.save(model, str(rewritten))
        del model
        blocked = _session(rewritten, 1, optimize=False)
        probe = _probe(plain, cut, 40)
        want, got = (_run(s, probe, "layout check")[0] for s in (plain, blocked))
    except Exception as exc:  # the rewrite's ValueError, or ONNX Runtime's own types
        return _as_optimised(plain, one_line(exc))
    if not np.array_equal(want, got):
        return _as_optimised(plain, "the blocked graph's samples differ")
    # The plain session's buffers and the check's go back to the shared arena: a run that
    # shrinks it gives them to the kernel.
    del plain
    _run(blocked, _probe(blocked, cut, 1), "layout check", shrink=True)
    return blocked, f"blocked ({saved} layout conversions fewer per run)"


def _keep(made: Path, kept: Path) -> None:
    """``made`` copied to ``kept`` whole or not at all; the files kept for other machines or
    other ONNX Runtimes go.  A cache that cannot be written costs only the next load's time."""
    try:
        with made.open("rb") as src, atomic.writing(kept) as dst:
            shutil.copyfileobj(src, dst)
        for old in kept.parent.glob(f"{kept.name.split('.blocked-')[0]}.blocked-*.onnx"):
            if old != kept:
                old.unlink(missing_ok=True)
    except (OSError, atomic.Abandoned) as exc:
        log.info("2-D decoder not kept for the next load: %s", one_line(exc))


def _machine_key(path: Path) -> str:
    """What the blocked graph depends on: ONNX Runtime's version, the CPU's features (its
    kernels and block size follow them), and the source graph (its size and time)."""
    flags = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            flags = next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        flags = platform.machine()  # no /proc: the architecture stands for the features
    st = path.stat()
    text = f"{ort.__version__}|{flags.strip()}|{st.st_size}|{st.st_mtime_ns}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _as_optimised(session: ort.InferenceSession, why: str) -> tuple[ort.InferenceSession, str]:
    # Said once per load: the voice runs as before, ~5 % dearer per frame ahead.
    log.info("2-D decoder kept as ONNX Runtime optimised it: %s", why)
    return session, f"as optimised ({why})"


def _probe(session: ort.InferenceSession, cut: CutNames, kept: int) -> dict[str, np.ndarray]:
    """Seeded random feeds for a decoder: ``kept`` frames and 10 of context each side
    (cropped inside, where the graph crops)."""
    rng = np.random.default_rng(0)
    frames = kept + 20
    feeds = {cut.z: rng.standard_normal(_shape(session, cut.z, frames)).astype(np.float32)}
    if cut.g is not None:
        feeds[cut.g] = rng.standard_normal(_shape(session, cut.g, 1)).astype(np.float32)
    if (crops := read_crops(session.get_modelmeta().custom_metadata_map)) is not None:
        feeds.update(crops.feeds(frames, 10, 10)[0])
    return feeds


def _shape(session: ort.InferenceSession, name: str, frames: int) -> list[int]:
    """The input ``name``'s shape for one utterance of ``frames`` frames: its last dimension
    (time), where not fixed, is ``frames``; any other not fixed (the batch) is 1."""
    shape = next(i.shape for i in session.get_inputs() if i.name == name)
    last = len(shape) - 1
    return [d if isinstance(d, int) else frames if k == last else 1 for k, d in enumerate(shape)]


SHRINK_ABOVE_FRAMES = 64
"""A flow or decoder run over more latent frames than this gives its arena's free regions
back when it ends (see :func:`_run`): a decoder window of 256 frames held +34 MB per
decoder for good.  A first packet's windows (at most 34 frames and their context) leave
the arena as it is, and the next request's first packet, after a long run shrank it, cost
the same CPU as after another first packet (136.5 against 135.0 ms on a loaded box, the
1-D decoder urgent; with ``intra_op_threads: 1`` the 2-D decoder serves both and paid
~4 ms more)."""

SHRINK_ABOVE_IDS = 256
"""The same for a prior (or encoder) run over more phoneme ids: a first clause of a few
sentences stays; 1 024 ids (``engine.max_phonemes``) held +66 MB for good."""


def _run(
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


def _zeros(session: ort.InferenceSession, name: str) -> FloatArray:
    """Zeros for the input ``name``, one frame wide (its one dimension not fixed)."""
    return np.zeros(_shape(session, name, 1), dtype=np.float32)


def _add_crops(
    crops: MarginCrops | None,
    feeds: dict[str, np.ndarray],
    window: Window,
) -> tuple[int, tuple[int, int]]:
    """Feed a part that crops its margins (:mod:`appliance.model.margins`): what no later layer
    needs is left out inside the graph.  Returns the frames its output covers and the
    margins still to trim from it (what the last crop kept)."""
    frames, margins = window.frames, window.margins
    if crops is None:
        return frames, margins
    extra, left, right = crops.feeds(frames, *margins)
    feeds.update(extra)
    return frames - (margins[0] - left) - (margins[1] - right), (left, right)


class OnnxVoiceModel(VoiceModel):
    backend_name = "onnx-cpu"

    def __init__(
        self,
        model_path: Path,
        encoder: ort.InferenceSession | None,
        decoder: ort.InferenceSession | None,
        cut: CutNames | None,
        threads: int,
        spin: bool = False,
        lean: ort.InferenceSession | None = None,
        pool_cpus: Sequence[int] = (),
        meter: RunMeter | None = None,
    ) -> None:
        self._model_path = model_path
        self.meter = meter if meter is not None else RunMeter()
        """Each run's cost by part (appliance.ops.meter): the runtime's one meter, shared
        by its voices, or this model's own."""
        self._threads = threads
        self._spin = spin
        self._pool_cpus = tuple(pool_cpus)
        self._fused: ort.InferenceSession | None = None
        self._fused_lock = threading.Lock()
        self._encoder = encoder
        self._decoder = decoder
        self._lean = lean
        """The decoder with 2-D convolutions on one thread: the cheapest per frame."""
        self.lean_layout = "" if lean is None else "as optimised"
        """How the 2-D decoder runs: ``blocked (...)`` (:func:`blocked_lean`), or ``as
        optimised`` and why."""
        self._crops: dict[int, MarginCrops] = {}
        """Per decoder or flow session (by id), where it crops its margins, if it does."""
        for s in (decoder, lean):
            self._read_crops(s)
        self._cut = cut
        self._prior: ort.InferenceSession | None = None
        self._noise: NoiseFeed | None = None
        """How the prior takes its noise, when the cut made it take it (appliance.model.noise)."""
        self._flow: ort.InferenceSession | None = None
        self._flow_context = 0

    @classmethod
    def load(
        cls,
        model_path: Path,
        encoder_path: Path | None,
        decoder_path: Path | None,
        cut: CutNames | None,
        threads: int,
        spin: bool = False,
        flow: FlowSplit | None = None,
        lean_decoder: Path | None = None,
        pool_cpus: Sequence[int] = (),
        meter: RunMeter | None = None,
    ) -> OnnxVoiceModel:
        """``lean_decoder``: the 2-D decoder (:mod:`appliance.model.conv2d`), run on one thread
        for every window but an urgent one; those keep the 1-D decoder on ``threads``
        threads, which it splits well.  With one thread the 1-D decoder is not loaded.
        ``pool_cpus``: where each session's pool threads run (see ``_session``).  ``meter``:
        where its runs are counted (its own when None)."""
        if encoder_path is None or decoder_path is None or cut is None:
            model = cls(
                model_path, None, None, None, threads, spin, pool_cpus=pool_cpus, meter=meter
            )
            model._fused_session()
            return model

        def session(path: Path) -> ort.InferenceSession:
            return _session(path, threads, spin, pool_cpus)

        lean, layout = blocked_lean(lean_decoder, cut) if lean_decoder else (None, "")
        decoder = session(decoder_path) if lean is None or threads > 1 else None
        if flow is None or cut.z_p is None or cut.mask is None:
            encoder = session(encoder_path)
            model = cls(model_path, encoder, decoder, cut, threads, spin, lean, pool_cpus, meter)
            model.lean_layout = layout
            return model
        # Prior + flow replace the encoder (the same weights; loading both would double them).
        model = cls(model_path, None, decoder, cut, threads, spin, lean, pool_cpus, meter)
        model.lean_layout = layout
        model._prior = session(flow.prior_path)
        model._noise = NoiseFeed.of(model._prior.get_modelmeta().custom_metadata_map)
        model._flow = session(flow.flow_path)
        model._read_crops(model._flow)
        model._flow_context = cut.flow_context
        return model

    def _read_crops(self, session: ort.InferenceSession | None) -> None:
        if session is not None and (
            crops := read_crops(session.get_modelmeta().custom_metadata_map)
        ):
            self._crops[id(session)] = crops

    @property
    def flow_context(self) -> int:
        return self._flow_context

    def _fused_session(self) -> ort.InferenceSession:
        # The fused graph is only needed for voices that cannot stream and for
        # reference checks; loading it lazily keeps ~65 MB out of a streaming daemon.
        with self._fused_lock:
            if self._fused is None:
                self._fused = _session(self._model_path, self._threads, self._spin, self._pool_cpus)
            return self._fused

    def _feeds(self, ids: IntArray, scales: Scales, speaker: int | None) -> dict[str, np.ndarray]:
        feeds: dict[str, np.ndarray] = {
            "input": ids.reshape(1, -1).astype(np.int64, copy=False),
            "input_lengths": np.array([ids.shape[-1]], dtype=np.int64),
            "scales": scales.as_array(),
        }
        if speaker is not None:
            feeds["sid"] = np.array([speaker], dtype=np.int64)
        return feeds

    @property
    def seeded_noise(self) -> bool:
        """Whether ``Scales.seed`` is honoured (the prior takes its noise from us)."""
        return self._noise is not None

    @property
    def retimes(self) -> bool:
        """The prior gives its mean, scale and unrounded durations: re-timed exactly."""
        return self._prior is not None and self._noise is not None and self._noise.unrounded

    def _run_encoder(
        self, session: ort.InferenceSession, ids: IntArray, scales: Scales, speaker: int | None
    ) -> tuple[FloatArray, FloatArray, FloatArray | None, int | None]:
        """(latent, durations, g, frames before re-timing or None): the prior's ``z_p`` (or
        the encoder's ``z``)."""
        noise = self._noise if session is self._prior else None
        retimed = noise is not None and noise.unrounded and scales.rate != 1.0
        # Re-timed: the graph times the ids at the voice's own scale, as piper-tts does.
        run = dataclasses.replace(scales, rate=1.0) if retimed else scales
        feeds = self._feeds(ids, run, speaker)
        rng: np.random.Generator | None = None
        if noise is not None:
            rng = np.random.default_rng(
                None
                if scales.seed is None
                else call_seed(scales.seed, ids, scales.as_array(), speaker)
            )
            feeds.update(noise.inputs(ids.shape[-1], rng))
        part = "prior" if session is self._prior else "encoder"
        with self.meter.timed(part) as counted:
            outs = _run(session, feeds, "encoder", ids.shape[-1] > SHRINK_ABOVE_IDS)
            counted.frames = int(outs[0].shape[-1])
        latent = np.ascontiguousarray(outs[0], dtype=np.float32)
        durations = np.asarray(outs[1], dtype=np.float32).reshape(-1)
        has_g = self._cut is not None and self._cut.g is not None
        g = np.asarray(outs[2], dtype=np.float32) if has_g and len(outs) > 2 else None
        base: int | None = None
        if noise is not None and rng is not None and (scales.seed is not None or retimed):
            # The graph's own z_p carries ONNX Runtime's noise over the graph's frames:
            # drawn here instead, over the re-timed frames if the rate asks for them.
            named = dict(zip((o.name for o in session.get_outputs()), outs, strict=True))
            mean, std = named[MEAN], named[STD]
            if retimed:
                new = retime(durations, named[UNROUNDED], scales.rate, scales.anchors)
                mean, std = respace(mean, durations, new), respace(std, durations, new)
                base, durations = int(durations.sum()), new
            latent = noise.z_p(mean, std, rng)
        return latent, durations, g, base

    def encode(self, ids: IntArray, scales: Scales, speaker: int | None) -> Encoded:
        if self._prior is not None:
            enc = self.encode_prior(ids, scales, speaker)
            assert enc.z_p is not None
            enc.z[...] = self.flow(Window(enc.z_p, enc.g))
            enc.z_p, enc.ready = None, enc.frames
            return enc
        if self._encoder is None or self._cut is None:
            raise BackendError("this voice has no verified encoder/decoder split")
        z, durations, g, _ = self._run_encoder(self._encoder, ids, scales, speaker)
        return Encoded(z=z, durations=durations, g=g)

    def encode_prior(self, ids: IntArray, scales: Scales, speaker: int | None) -> Encoded:
        if self._prior is None:
            return self.encode(ids, scales, speaker)
        z_p, durations, g, base = self._run_encoder(self._prior, ids, scales, speaker)
        return Encoded(
            z=np.empty_like(z_p), durations=durations, g=g, z_p=z_p, ready=0, base_frames=base
        )

    def flow(self, window: Window) -> FloatArray:
        if self._flow is None or self._cut is None or self._cut.z_p is None:
            raise BackendError(f"{self.backend_name}: this voice has no separate flow")
        assert self._cut.mask is not None
        feeds = {
            self._cut.z_p: window.z,
            # One unpadded utterance: every frame is valid.
            self._cut.mask: np.ones((1, 1, window.frames), dtype=np.float32),
        }
        frames, (left, right) = _add_crops(self.margin_crops("flow"), feeds, window)
        with self.meter.timed("flow", frames - left - right):
            z = self._run_latent(self._flow, feeds, window, "flow")
        if z.shape[2] != frames:
            raise BackendError(f"cropped flow gave {z.shape[2]} frames for {frames}")
        return z[:, :, left : frames - right]

    def _decoder_for(self, urgent: bool) -> ort.InferenceSession | None:
        # Urgent: the 1-D decoder on every thread; otherwise the 2-D one on one thread.
        # (With one of them loaded, that one.)
        return (self._decoder if urgent else self._lean) or self._decoder or self._lean

    def margin_crops(self, part: Literal["urgent", "ahead", "flow"]) -> MarginCrops | None:
        """Where a part crops its margins, if it does: the decoder of an urgent window, that
        of a window ahead, or the flow."""
        session = self._flow if part == "flow" else self._decoder_for(part == "urgent")
        return self._crops.get(id(session)) if session is not None else None

    def decode(self, window: Window) -> FloatArray:
        session = self._decoder_for(window.urgent)
        if session is None or self._cut is None:
            raise BackendError("this voice has no verified encoder/decoder split")
        feeds: dict[str, np.ndarray] = {self._cut.z: window.z}
        crops = self.margin_crops("urgent" if window.urgent else "ahead")
        frames, margins = _add_crops(crops, feeds, window)
        part = "decoder_urgent" if window.urgent else "decoder"
        with self.meter.timed(part, frames - sum(margins)):
            audio = self._run_latent(session, feeds, window, "decoder").reshape(-1)
        if crops is not None and audio.shape[0] != frames * crops.points[-1][0]:
            # Each stage is taken to multiply the length by its stride: one that does not
            # would leave the crops in the wrong places (the cut's check catches it first).
            raise BackendError(f"cropped decoder gave {audio.shape[0]} samples for {frames} frames")
        return drop_margins(audio, frames, margins)

    def _run_latent(
        self,
        session: ort.InferenceSession,
        feeds: dict[str, np.ndarray],
        window: Window,
        what: str,
        shrink: bool = False,
    ) -> FloatArray:
        """Run a part fed by ``window`` (flow, decoder), adding the speaker conditioning;
        a long run (:data:`SHRINK_ABOVE_FRAMES`), or one asked to, gives its arena back."""
        assert self._cut is not None
        if self._cut.g is not None and window.g is not None:
            feeds[self._cut.g] = window.g
        shrink = shrink or window.frames > SHRINK_ABOVE_FRAMES
        return np.asarray(_run(session, feeds, what, shrink)[0], dtype=np.float32)

    def fused(self, ids: IntArray, scales: Scales, speaker: int | None) -> FloatArray:
        session = self._fused_session()
        feeds = self._feeds(ids, scales, speaker)
        if "sid" not in {i.name for i in session.get_inputs()}:
            feeds.pop("sid", None)
        with self.meter.timed("fused"):  # samples, not frames: its frames stay 0
            outs = _run(session, feeds, "model")
        return np.asarray(outs[0], dtype=np.float32).reshape(-1)

    def release_memory(self) -> None:
        """The shared arena's free regions (:func:`shared_cpu_arena`) go back: those that
        runs too short to shrink it (:data:`SHRINK_ABOVE_FRAMES`, :data:`SHRINK_ABOVE_IDS`)
        left there.  Any session's run can shrink it: a decoder run over one frame of zeros
        (~1.5 ms).  Over 3 000 mixed requests the daemon kept 180–208 MB after its heap
        trims, by which runs had come last; with this, 178–187 MB (docs/speed.md)."""
        session = self._decoder_for(False)
        if session is None or self._cut is None:
            return
        cut = self._cut
        window = Window(_zeros(session, cut.z), _zeros(session, cut.g) if cut.g else None)
        feeds: dict[str, np.ndarray] = {cut.z: window.z}
        _add_crops(self.margin_crops("ahead"), feeds, window)
        self._run_latent(session, feeds, window, "arena release", shrink=True)

    def close(self) -> None:
        """Nothing to release: the sessions go with the object."""
