"""Everything the server serves from: voices on their backends, the scheduler, metrics.

``Runtime.load`` does all the slow I/O (voice discovery, cutting, session
creation, warm-up) before the socket accepts anyone.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.core.admission import process_cpu_s
from appliance.core.scheduler import Scheduler
from appliance.core.streaming import VoiceRuntime
from appliance.model.engine.base import Scales
from appliance.model.engine.gpu_select import gpu_health
from appliance.model.engine.select import load_voice_model
from appliance.model.engine.threads import Pinning, cpu_threads, pinning
from appliance.model.engine.windows import decode_span
from appliance.model.voices import discover, load_voice
from appliance.ops.config import Config
from appliance.ops.metrics import Metrics
from appliance.ops.notify import Notifier
from appliance.ops.paths import default_cache_dir
from appliance.playback import Player
from appliance.text.frontend import FrontendLimits
from appliance.text.lexicon import Lexicon
from appliance.text.normalize import family as normalize_family
from appliance.text.normalize import supported_languages
from appliance.text.phonemize import Phonemizer
from appliance.voicetypes import Voice

log = logging.getLogger(__name__)

WARM_UP_FIRST = "Ready when you are, just say the word and we begin."
WARM_UP_LATER = (
    "The committee met on a cold and windy morning to review the proposal for the new "
    "library building, which would replace the old one in the town square."
)


class StartError(RuntimeError):
    """The daemon cannot start (no default voice): one line for the log, exit non-zero."""


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def load_one(
    name: str, path: Path, cache: Path, cfg: Config, pins: Pinning | None
) -> tuple[VoiceRuntime, Voice, dict[str, Any]]:
    """One voice, cut (or its cached cut) and on its backend."""
    t0 = time.monotonic()
    voice = load_voice(name, path, cache)
    model, status = load_voice_model(voice, cfg, pins)
    info = voice.info
    runtime = VoiceRuntime(
        name=name,
        language=info.language,
        sample_rate=info.sample_rate,
        hop=info.hop_length,
        phonemizer=Phonemizer(info),
        model=model,
        can_stream=voice.split_ok,
        defaults=Scales(info.noise_scale, info.length_scale, info.noise_w),
        default_speaker=info.speaker_id(None),
        context=voice.context_frames
        if cfg.engine.context_frames is None
        else cfg.engine.context_frames,
    )
    log.info(
        "voice %s loaded in %.0f ms (%s, %s)",
        name,
        (time.monotonic() - t0) * 1000,
        status.get("backend", "?"),
        ("streaming, flow windowed" if voice.flow_split else "streaming")
        if voice.split_ok
        else f"whole-sentence: {voice.split_note}",
    )
    return runtime, voice, dict(status)


def log_skipped(skipped: dict[str, str], known: dict[str, str] | None = None) -> None:
    """One line for each voice file left out, unless ``known`` has it for the same reason
    (a reload says only what is new; ``ttsctl voices`` lists them all)."""
    for path, why in skipped.items():
        if (known or {}).get(path) != why:
            log.error("voice %s (%s) skipped: %s", Path(path).name.removesuffix(".onnx"), path, why)


def _voice_extras(meta: Voice) -> dict[str, Any]:
    """``info``'s per-voice fields added for issue 31 (v1 only grows)."""
    info = meta.info
    default = next(
        (n for n, i in info.speaker_id_map.items() if i == info.default_speaker),
        str(info.default_speaker),
    )
    return {
        "quality": info.quality or None,
        "num_speakers": info.num_speakers,
        "default_speaker": default if info.num_speakers > 1 else None,
        "normalized": normalize_family(info.language) in supported_languages(),
    }


@dataclass
class Runtime:
    config: Config
    voices: dict[str, VoiceRuntime]
    voice_meta: dict[str, Voice]
    default_voice: str
    scheduler: Scheduler
    metrics: Metrics
    backend_status: dict[str, Any] = field(default_factory=dict)
    player: Player | None = None
    """The speaker, when playback is enabled (``speak`` answers no_audio_device without it)."""
    lexicon: Lexicon | None = None
    """The user's lexicon (``voices.lexicon``), replaced whole on SIGHUP."""
    stream_cost: float | None = None
    """CPU seconds per second of audio a stream's later clauses took at start-up (the
    costliest voice): admission's estimate until real streams have been measured."""
    skipped: dict[str, str] = field(default_factory=dict)
    """Voice files left out (path → why, one line): ``info`` lists them, SIGHUP retries."""
    pins: Pinning | None = None
    """The thread placement the voices' sessions were made with (voices added on SIGHUP)."""
    cache_dir: Path | None = None

    @classmethod
    def load(cls, cfg: Config, notifier: Notifier | None = None, *, warm: bool = True) -> Runtime:
        """Discover, split, load and warm every voice (slow: run it off the event loop).

        ``notifier`` gets EXTEND_TIMEOUT_USEC while long steps (engine builds) run.
        ``warm=False`` leaves the warm-up and the workers to :meth:`finish_start`.
        """
        cache = Path(cfg.voices.cache_dir) if cfg.voices.cache_dir else default_cache_dir()
        skipped: dict[str, str] = {}
        found = discover(cfg.voices.voices_dir, skipped)
        log_skipped(skipped)
        if cfg.voices.default not in found:
            raise StartError(
                f"voices.default: voice {cfg.voices.default!r} not found"
                f" (have: {', '.join(sorted(found))})"
            )
        voices: dict[str, VoiceRuntime] = {}
        metas: dict[str, Voice] = {}
        status: dict[str, Any] = {}
        # One placement of threads for the workers and every voice's sessions.
        pins = pinning(cfg, cpu_threads(cfg))
        for name, path in found.items():
            if notifier is not None:
                notifier.extend_timeout(120_000_000)
            try:
                voices[name], metas[name], status = load_one(name, path, cache, cfg, pins)
            except Exception as exc:  # a foreign file: protobuf, onnxruntime, JSON errors …
                why = one_line(exc)
                if name == cfg.voices.default:
                    raise StartError(
                        f"default voice {name} ({path}) cannot be loaded: {why}"
                    ) from None
                skipped[str(path)] = why
                log_skipped({str(path): why})
        scheduler = Scheduler(cfg.engine.workers, cpus=pins.workers if pins else None)
        rt = cls(cfg, voices, metas, cfg.voices.default, scheduler, Metrics(), status)
        rt.skipped, rt.pins, rt.cache_dir = skipped, pins, cache
        if warm:
            rt.finish_start()
        return rt

    def finish_start(self) -> None:
        """Warm every voice up, then start the workers (slow: off the event loop).  The
        daemon does it once it listens, so ping, info and health are answered meanwhile
        (the warm-up was 0.7 s of a start-up before the first answer)."""
        self.stream_cost = self.warm_up()
        self.scheduler.start()

    def backend_state(self) -> dict[str, Any]:
        """Start-up status merged with the live failover state of the default voice."""
        return gpu_health(self.voices[self.default_voice].model, self.backend_status)

    def frontend_limits(self) -> FrontendLimits:
        c = self.config
        return FrontendLimits(
            max_chars=c.limits.max_text_chars,
            sentence_chars=c.streaming.max_sentence_chars,
            first_clause_chars=c.streaming.first_clause_chars,
        )

    def warm_up(self) -> float | None:
        """Run every voice through the shapes a request takes, so the first client pays
        for no lazy initialisation: ONNX Runtime grows its arenas on a session's first
        runs at a size, and a first request after start was ~15 ms slower than the tenth.

        A first clause as long as any (prior, windowed flow, first chunk, windows decoded
        ahead up to the largest) and a later clause (whole encoder, and whole as a
        ``sentence``-mode chunk is: decoder runs of the longest kind).  On the way it
        measures what a quick start plans with (``VoiceRuntime.costs``).

        Returns the costliest voice's CPU seconds per second of audio for the later
        clause's encoder and windows, as a stream pays them (this process's CPU time:
        the figure means something only when nothing else runs, as at start-up).
        """
        cost: float | None = None
        for v in self.voices.values():
            one = self.warm_voice(v)
            if one is not None:
                cost = max(cost or 0.0, one)
        return cost

    def warm_voice(self, v: VoiceRuntime) -> float | None:
        """One voice through :meth:`warm_up`'s shapes; its CPU seconds per audio second."""
        cost: float | None = None
        t0 = time.monotonic()
        context = v.context
        for text in (WARM_UP_FIRST, WARM_UP_LATER):
            ids = v.phonemizer.ids(text)
            if not v.can_stream:
                v.model.fused(ids, v.defaults, v.default_speaker)
                continue
            cpu0 = process_cpu_s()
            if text is WARM_UP_FIRST:
                # encode_prior + decode_span run the prior and the windowed flow, if any.
                enc = v.model.encode_prior(ids, v.defaults, v.default_speaker)
            else:
                enc = v.model.encode(ids, v.defaults, v.default_speaker)
            cpu = process_cpu_s() - cpu0
            for width in (8, 16, 32):  # first chunks: the decoder a listener waits for
                t_dec = time.monotonic()
                decode_span(v.model, enc, 0, min(enc.frames, width), context, v.hop, True)
                if width == 16:
                    v.costs.first_decode_s = time.monotonic() - t_dec
            enc.ahead = None
            a = 8
            cpu0 = process_cpu_s()
            while a < enc.frames:  # the stream's own windows, decoded ahead
                b = min(enc.frames, a + 2 * a)
                decode_span(v.model, enc, a, b, context, v.hop)
                a = b
            cpu += process_cpu_s() - cpu0
            if text is WARM_UP_LATER:  # a sentence-mode chunk: the longest decoder runs
                decode_span(v.model, enc, 0, enc.frames, context, v.hop)
                # What a whole sentence's prior costs per id: a quick start's estimate.
                t_prior = time.monotonic()
                v.model.encode_prior(ids, v.defaults, v.default_speaker)
                v.costs.prior_s_per_id = (time.monotonic() - t_prior) / len(ids)
                audio_s = enc.frames * v.hop / v.sample_rate
                if audio_s > 0:
                    cost = max(cost or 0.0, cpu / audio_s)
        log.debug("warm-up of %s: %.0f ms", v.name, (time.monotonic() - t0) * 1000)
        return cost

    def info(self) -> dict[str, Any]:
        c = self.config
        voices = []
        for meta in self.voice_meta.values():
            d = meta.info.describe()
            d["streaming"] = meta.split_ok
            d["flow"] = "windowed" if meta.flow_split is not None else "whole"
            if meta.split_ok:
                d["context_frames"] = self.voices[meta.name].context
                d["decoder"] = "2d" if meta.lean_decoder_path is not None else "1d"
                d["margins"] = "cropped" if meta.margin_decoder_path is not None else "decoded"
            else:
                d["note"] = meta.split_note
            d.update(_voice_extras(meta))
            voices.append(d)
        return {
            "protocol": 1,
            "backend": self.backend_status.get("backend", "onnx-cpu"),
            "voices": voices,
            "default_voice": self.default_voice,
            "formats": ["s16le", "f32le", "mulaw", "alaw"],
            "limits": {
                "max_text_chars": c.limits.max_text_chars,
                "max_message_bytes": c.limits.max_message_bytes,
                "max_inflight_per_connection": c.limits.max_inflight_per_connection,
            },
            # Issue 31: what was left out, and which languages the normaliser has rules for.
            "voices_skipped": [{"file": f, "reason": r} for f, r in sorted(self.skipped.items())],
            "normalizer_languages": list(supported_languages()),
        }

    def close(self) -> None:
        if self.player is not None:
            self.player.close()
        self.scheduler.stop()
        for v in self.voices.values():
            v.model.close()
