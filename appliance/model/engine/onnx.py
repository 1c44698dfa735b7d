"""ONNX Runtime CPU backend: always loaded, always warm, the failover target."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import onnxruntime as ort

from appliance.model.engine import sessions
from appliance.model.engine.base import (
    BackendError,
    Encoded,
    Scales,
    VoiceModel,
    Window,
    drop_margins,
)
from appliance.model.engine.blocked import blocked_lean
from appliance.model.margins import MarginCrops, read_crops
from appliance.model.noise import MEAN, STD, UNROUNDED, NoiseFeed, call_seed
from appliance.model.retime import respace, retime
from appliance.ops.meter import RunMeter
from appliance.speech import FloatArray, IntArray
from appliance.voicetypes import CutNames, FlowSplit


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
        ``pool_cpus``: where each session's pool threads run (see
        ``sessions.open_session``).  ``meter``: where its runs are counted (its own when
        None)."""
        if encoder_path is None or decoder_path is None or cut is None:
            model = cls(
                model_path, None, None, None, threads, spin, pool_cpus=pool_cpus, meter=meter
            )
            model._fused_session()
            return model

        def session(path: Path) -> ort.InferenceSession:
            return sessions.open_session(path, threads, spin, pool_cpus)

        lean, layout = blocked_lean(lean_decoder, cut) if lean_decoder else (None, "")
        decoder = session(decoder_path) if lean is None or threads > 1 else None
        split = flow if cut.z_p is not None and cut.mask is not None else None
        # Prior + flow replace the encoder (the same weights; loading both would double them).
        encoder = session(encoder_path) if split is None else None
        model = cls(model_path, encoder, decoder, cut, threads, spin, lean, pool_cpus, meter)
        model.lean_layout = layout
        if split is None:
            return model
        model._prior = session(split.prior_path)
        model._noise = NoiseFeed.of(model._prior.get_modelmeta().custom_metadata_map)
        model._flow = session(split.flow_path)
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
                self._fused = sessions.open_session(
                    self._model_path, self._threads, self._spin, self._pool_cpus
                )
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
            outs = sessions.run_session(
                session, feeds, "encoder", ids.shape[-1] > sessions.SHRINK_ABOVE_IDS
            )
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
        a long run (:data:`sessions.SHRINK_ABOVE_FRAMES`), or one asked to, gives its arena
        back."""
        assert self._cut is not None
        if self._cut.g is not None and window.g is not None:
            feeds[self._cut.g] = window.g
        shrink = shrink or window.frames > sessions.SHRINK_ABOVE_FRAMES
        return np.asarray(sessions.run_session(session, feeds, what, shrink)[0], dtype=np.float32)

    def fused(self, ids: IntArray, scales: Scales, speaker: int | None) -> FloatArray:
        session = self._fused_session()
        feeds = self._feeds(ids, scales, speaker)
        if "sid" not in {i.name for i in session.get_inputs()}:
            feeds.pop("sid", None)
        with self.meter.timed("fused"):  # samples, not frames: its frames stay 0
            outs = sessions.run_session(session, feeds, "model")
        return np.asarray(outs[0], dtype=np.float32).reshape(-1)

    def release_memory(self) -> None:
        """The shared arena's free regions (:func:`sessions.shared_cpu_arena`) go back:
        those that runs too short to shrink it (:data:`sessions.SHRINK_ABOVE_FRAMES`,
        :data:`sessions.SHRINK_ABOVE_IDS`) left there.  Any session's run can shrink it: a
        decoder run over one frame of zeros (~1.5 ms).  Over 3 000 mixed requests the daemon
        kept 180–208 MB after its heap trims, by which runs had come last; with this,
        178–187 MB (docs/speed.md)."""
        session = self._decoder_for(False)
        if session is None or self._cut is None:
            return
        cut = self._cut
        window = Window(
            sessions.zeros(session, cut.z), sessions.zeros(session, cut.g) if cut.g else None
        )
        feeds: dict[str, np.ndarray] = {cut.z: window.z}
        _add_crops(self.margin_crops("ahead"), feeds, window)
        self._run_latent(session, feeds, window, "arena release", shrink=True)

    def close(self) -> None:
        """Nothing to release: the sessions go with the object."""
