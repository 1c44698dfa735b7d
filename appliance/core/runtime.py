"""Everything the server serves from: voices on their backends, the scheduler, metrics.

``Runtime.load`` does all the slow I/O (voice discovery, cutting, session creation).
The warm-up comes in two parts (issue 42): :meth:`Runtime.warm_first_packets` (first
packets on as many threads at once as there are workers, and one first clause whole,
which measures what admission plans with) before the daemon takes requests, and each
voice's later clause (:meth:`Runtime.warm_clause`: the long encoder, whole-sentence
decodes, a sentence's prior per id) after, as batch work the scheduler stops for any
newcomer.  A request sent during start-up waits for the first part only.

A :class:`Runtime` is a value: frozen once :meth:`Runtime.load` returns (assigning to it,
or into its ``voices``, raises).  A reload builds a new one with ``dataclasses.replace``
and the service swaps it in whole (``Service.swap_runtime``, called by
:class:`appliance.reload.Reloader` alone); a request in flight keeps the voice it
resolved.  What changes in place belongs to an object with its own owner: the
scheduler's queue, the metrics, and the warm-up's progress (:attr:`Runtime.warm`), which
every runtime made from the first shares.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from appliance.core.scheduler import Scheduler
from appliance.core.streaming import VoiceRuntime
from appliance.core.warmup import (
    WARM_UP_FIRST,
    ClauseWarmUp,
    WarmState,
    costliest,
    keep_cost,
    known_costs,
    warm_first_packet,
)
from appliance.errors import ErrorCode, ServiceError
from appliance.model.engine.base import Scales, VoiceModel
from appliance.model.engine.gpu_select import gpu_health
from appliance.model.engine.onnx import OnnxVoiceModel
from appliance.model.engine.pool import FailoverVoiceModel
from appliance.model.engine.select import load_voice_model
from appliance.model.engine.threads import CpuPlan, cpu_plan
from appliance.model.voices import discover, load_voice
from appliance.ops import memory
from appliance.ops.config import Config
from appliance.ops.cpuquota import cpu_quota
from appliance.ops.logsetup import one_line
from appliance.ops.meter import RunMeter
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


class StartError(RuntimeError):
    """The daemon cannot start (no default voice): one line for the log, exit non-zero."""


def load_one(
    name: str,
    path: Path,
    cache: Path,
    cfg: Config,
    plan: CpuPlan,
    meter: RunMeter | None = None,
) -> tuple[VoiceRuntime, dict[str, Any]]:
    """One voice, cut (or its cached cut) and on its backend; the backend's status."""
    t0 = time.monotonic()
    voice = load_voice(name, path, cache)
    model, status = load_voice_model(voice, cfg, plan, meter)
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
        source=voice,
        context=voice.context_frames
        if cfg.engine.context_frames is None
        else cfg.engine.context_frames,
        costs=known_costs(voice, model.backend_name),
    )
    log.info(
        "voice %s loaded in %.0f ms (%s, %s%s)",
        name,
        (time.monotonic() - t0) * 1000,
        status.get("backend", "?"),
        ("streaming, flow windowed" if voice.flow_split else "streaming")
        if voice.split_ok
        else f"whole-sentence: {voice.split_note}",
        _decoder_note(model),
    )
    return runtime, dict(status)


def _decoder_note(model: VoiceModel) -> str:
    """How the CPU's 2-D decoder runs (appliance.model.engine.blocked), for the load line."""
    cpu = model.cpu if isinstance(model, FailoverVoiceModel) else model
    layout = cpu.lean_layout if isinstance(cpu, OnnxVoiceModel) else ""
    return f", 2-D decoder {layout}" if layout else ""


def log_skipped(skipped: Mapping[str, str], known: Mapping[str, str] | None = None) -> None:
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


@dataclass(frozen=True)
class Runtime:
    """What requests are served from, frozen once :meth:`load` returns (see the module)."""

    config: Config
    voices: Mapping[str, VoiceRuntime]
    """One object per voice, by name (a read-only view: a reload makes a new runtime)."""
    default_voice: str
    scheduler: Scheduler
    metrics: Metrics
    backend_status: Mapping[str, Any] = field(default_factory=dict)
    player: Player | None = None
    """The speaker, when playback is enabled (``speak`` answers no_audio_device without it)."""
    lexicon: Lexicon | None = None
    """The user's lexicon (``voices.lexicon``), replaced whole on SIGHUP."""
    skipped: Mapping[str, str] = field(default_factory=dict)
    """Voice files left out (path → why, one line): ``info`` lists them, SIGHUP retries."""
    plan: CpuPlan | None = None
    """The threads and placement the voices' sessions were made with (voices added on
    SIGHUP get the same)."""
    cache_dir: Path | None = None
    warm: WarmState = field(default_factory=WarmState)
    """How far the warm-up has got: changed in place by the warm-up alone, and shared by
    the runtimes a reload makes from this one."""
    meter: RunMeter = field(default_factory=RunMeter)
    """What the voices' CPU runs cost, by part (``stats.model_runs``): shared by every voice
    and by the runtimes a reload makes from this one."""

    def __post_init__(self) -> None:
        # Read-only views of the caller's dictionaries (a frozen dataclass sets its own
        # fields through object.__setattr__): ``rt.voices[name] = v`` raises too.
        for name in ("voices", "backend_status", "skipped"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))

    @property
    def stream_cost(self) -> float | None:
        """:attr:`WarmState.stream_cost`: admission's estimate until streams are measured."""
        return self.warm.stream_cost

    @property
    def first_packets_warm(self) -> bool:
        """:meth:`warm_first_packets` has run: a first packet now allocates nothing new."""
        return self.warm.first_packets

    @property
    def warm_up_done(self) -> bool:
        """The later clauses are warm too (the daemon runs them in the background)."""
        return self.warm.done

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
        status: dict[str, Any] = {}
        # One read of the CPUs: every voice's sessions and the workers sized and placed alike.
        plan = cpu_plan(cfg, cpu_quota())
        meter = RunMeter()
        for name, path in found.items():
            if notifier is not None:
                notifier.extend_timeout(120_000_000)
            try:
                voices[name], status = load_one(name, path, cache, cfg, plan, meter)
            except Exception as exc:  # a foreign file: protobuf, onnxruntime, JSON errors …
                why = one_line(exc)
                if name == cfg.voices.default:
                    raise StartError(
                        f"default voice {name} ({path}) cannot be loaded: {why}"
                    ) from None
                skipped[str(path)] = why
                log_skipped({str(path): why})
        scheduler = Scheduler(
            cfg.engine.workers,
            cpus=plan.pins.workers if plan.pins else None,
            quota=plan.quota,
            own_cores=plan.own_cores,
        )
        rt = cls(
            cfg,
            voices,
            cfg.voices.default,
            scheduler,
            Metrics(),
            status,
            skipped=skipped,
            plan=plan,
            cache_dir=cache,
            meter=meter,
        )
        if warm:
            rt.finish_start()
        return rt

    def finish_start(self) -> None:
        """The whole warm-up, then the workers (slow: off the event loop): what an
        in-process runtime does; the daemon runs :meth:`warm_first_packets` before it
        takes requests and each voice's later clause as batch work while it serves."""
        self.warm_first_packets()
        self.warm.finished(self.warm_later())
        self.scheduler.start()

    def backend_state(self) -> dict[str, Any]:
        """Start-up status merged with the live failover state of the default voice."""
        return gpu_health(self.voices[self.default_voice].model, dict(self.backend_status))

    def resolve_voice(
        self, name: str | None, speaker: str | int | None, language: str | None = None
    ) -> tuple[VoiceRuntime, int | None]:
        """The voice a request names (by name, else the first of ``language``, else the
        default) and its speaker id: ServiceError ``unknown_voice`` / ``bad_request``."""
        rt = self
        if name is None and language:
            name = next(
                (
                    v.name
                    for v in rt.voices.values()
                    if v.language.lower().replace("-", "_") == language.lower().replace("-", "_")
                    or v.language.split("_")[0].lower() == language.lower()
                ),
                None,
            )
            if name is None:
                raise ServiceError(
                    ErrorCode.UNKNOWN_VOICE, f"no voice for language {language[:32]!r}"
                )
        name = name or rt.default_voice
        voice = rt.voices.get(name)
        if voice is None:
            raise ServiceError(ErrorCode.UNKNOWN_VOICE, f"no voice named {name[:64]!r}")
        try:
            sid = voice.source.info.speaker_id(speaker)
        except KeyError:
            raise ServiceError(
                ErrorCode.BAD_REQUEST, f"voice {name} has no speaker {str(speaker)[:64]!r}"
            ) from None
        return voice, sid

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
        runs at a size, and a first request after start was ~15 ms slower than the tenth
        (the v1 ``warmup`` op).  Each voice's first and later clause (:meth:`warm_clause`);
        returns the costliest voice's later clause's cost."""
        cost: float | None = None
        for v in self.voices.values():
            cost = costliest(cost, self.warm_voice(v))
        return cost

    def warm_voice(self, v: VoiceRuntime) -> float | None:
        """One voice's first and later clause; the later one's cost (kept: keep_cost)."""
        self.warm_clause(v, first=True)
        cost = self.warm_clause(v, first=False)
        keep_cost(v, cost)
        return cost

    def warm_first_packets(self) -> None:
        """What a request sent now takes, warm (the daemon runs this before it takes
        requests; issue 42): every voice's first packet on ``engine.workers`` threads at
        once, as a burst runs them (ONNX Runtime sizes a session's arena by the runs that
        overlap: two at once faulted in ~20 MB more than one after the other), then its
        first clause whole (:meth:`warm_clause`), which measures what admission and a
        quick start plan with (``stream_cost``, ``VoiceRuntime.costs``).  Without that,
        admission's fixed guess refused three of eight requests sent at once.  A voice
        whose last start on this machine kept its costs (:func:`keep_cost`) uses those
        instead: the clause took ~0.7 s of a ~1 s warm-up (issue 42 asks ≤ 0.5 s), and
        this start's own measure replaces them in the background.

        The first phonemizer call of a voice (espeak loading its language: ~30 ms of CPU
        here, against ~1 ms later) is made here too."""
        t0 = time.monotonic()
        n = self.scheduler.workers
        cost: float | None = None
        with ThreadPoolExecutor(n, "warm") as pool:
            for v in self.voices.values():
                ids = v.phonemizer.ids(WARM_UP_FIRST)
                for f in [pool.submit(warm_first_packet, v, ids) for _ in range(n)]:
                    f.result()
                known = v.costs.stream_cost
                if known is None:
                    known = self.warm_clause(v, first=True)
                cost = costliest(cost, known)
        self.warm.first_packets_warm(cost)
        log.info("first packets warm in %.0f ms", (time.monotonic() - t0) * 1000)

    def warm_later(self) -> float | None:
        """Every voice's later clause (:meth:`warm_clause`, its cost kept: keep_cost); the
        costliest one's cost."""
        cost: float | None = None
        for v in self.voices.values():
            later = self.warm_clause(v, first=False)
            keep_cost(v, later)
            cost = costliest(cost, later)
        return cost

    def warm_clause(self, v: VoiceRuntime, first: bool) -> float | None:
        """One clause of ``v`` through the shapes a stream takes, straight through
        (:class:`appliance.core.warmup.ClauseWarmUp`); its CPU seconds per second of
        audio, None for a voice that cannot stream."""
        return ClauseWarmUp(v, first).run()

    def info(self) -> dict[str, Any]:
        c = self.config
        voices = []
        for voice in self.voices.values():
            meta = voice.source
            d = meta.info.describe()
            d["streaming"] = meta.split_ok
            d["flow"] = "windowed" if meta.flow_split is not None else "whole"
            if meta.split_ok:
                d["context_frames"] = voice.context
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

    def release_memory(self) -> None:
        """Give back what runs left allocated and nothing holds: garbage in reference
        cycles, each voice's backend's (ONNX Runtime's free arena regions), then glibc's
        free heap.  A few ms to tens: off the loop, at a quiet moment
        (:class:`appliance.upkeep.Upkeep`)."""
        # First, so that what the garbage held is free for the arena and glibc to give
        # back.  A client that leaves mid-stream leaves its connection in cycles (the
        # transport's write error, its traceback, the frames holding the last audio; a
        # worker's interrupted run, its feeds and outputs) that only a full collection
        # frees, and an idle daemon runs none: ~60 KB a dropped request stayed until later
        # requests' allocations set one off (docs/speed.md, stop 66).  Most of those cycles
        # are broken where they formed since (stop 67); the collection stays for the rest.
        memory.collect_garbage()
        for v in self.voices.values():
            v.model.release_memory()
        memory.trim()

    def close(self) -> None:
        if self.player is not None:
            self.player.close()
        self.scheduler.stop()
        for v in self.voices.values():
            v.model.close()
