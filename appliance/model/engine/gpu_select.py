"""Bring a voice up on the GPU: engines from the cache (or built and verified), the
failover pool in front of the CPU model, and the NVML watchdog behind it.

``backend: auto`` picks TensorRT when a GPU and TensorRT are usable.  Anything
that stops the GPU path (no TensorRT, a build failure, an engine that fails the
accuracy gate) leaves the daemon on the CPU with a WARNING and ``status:
degraded`` in the status dict; a CPU-only box is not degraded and logs one
INFO line for the disabled watchdog.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from appliance.model.engine import tensorrt as trt_backend
from appliance.model.engine import trt_seam
from appliance.model.engine.base import BackendError, VoiceModel
from appliance.model.engine.engine_cache import EngineCache, EngineKey, Lookup
from appliance.model.engine.onnx import OnnxVoiceModel
from appliance.model.engine.pool import FailoverVoiceModel
from appliance.model.engine.tensorrt import (
    ENCODER_OPT_PHONEMES,
    EngineBuildError,
    EngineLoadError,
    ModelLimits,
    TensorRTVoiceModel,
    accuracy_snr_db,
    build_engine,
    device_count,
    device_info,
)
from appliance.model.engine.threads import cpu_threads
from appliance.model.engine.trt_seam import TrtRuntime
from appliance.ops import nvml as nvml_seam
from appliance.ops.config import Config
from appliance.ops.paths import default_cache_dir
from appliance.ops.watchdog import GpuWatchdog
from appliance.voicetypes import Voice

log = logging.getLogger(__name__)

PARTS = ("encoder", "decoder")
Progress = Callable[[str], None]


def engine_dir(cfg: Config) -> Path:
    """Where engines are cached: config, then systemd's CacheDirectory, then the voice cache."""
    if cfg.gpu.engine_dir:
        return Path(cfg.gpu.engine_dir)
    if os.environ.get("CACHE_DIRECTORY"):
        return Path(os.environ["CACHE_DIRECTORY"].split(":", 1)[0]) / "engines"
    if cfg.voices.cache_dir:
        return Path(cfg.voices.cache_dir) / "engines"
    return default_cache_dir() / "engines"


def _limits(cfg: Config) -> ModelLimits:
    lo, opt, hi = cfg.gpu.decoder_frames
    return ModelLimits(max_phonemes=cfg.engine.max_phonemes, decoder_frames=(lo, opt, hi))


def _ranges(cfg: Config) -> dict[str, tuple[int, int, int]]:
    lo, opt, hi = cfg.gpu.decoder_frames
    max_ph = cfg.engine.max_phonemes
    return {"encoder": (1, min(ENCODER_OPT_PHONEMES, max_ph), max_ph), "decoder": (lo, opt, hi)}


def _keys(rt: TrtRuntime, voice: Voice, cfg: Config, precision: str) -> dict[str, EngineKey]:
    dev = device_info(rt, cfg.gpu.device_index)
    ranges = _ranges(cfg)
    return {
        part: EngineKey(
            voice=voice.name,
            part=part,
            model_sha256=voice.sha256,
            tensorrt=rt.version,
            gpu_name=dev.name,
            compute_capability=dev.compute_capability,
            precision=precision,
            profile=ranges[part],
        )
        for part in PARTS
    }


def _onnx_paths(voice: Voice) -> dict[str, Path]:
    if not voice.split_ok or voice.encoder_path is None or voice.decoder_path is None:
        raise EngineBuildError(f"voice {voice.name} has no verified encoder/decoder split")
    return {"encoder": voice.encoder_path, "decoder": voice.decoder_path}


def _load(rt: TrtRuntime, plans: dict[str, bytes], cfg: Config) -> TensorRTVoiceModel:
    return TensorRTVoiceModel.load(
        rt,
        plans["encoder"],
        plans["decoder"],
        device_index=cfg.gpu.device_index,
        limits=_limits(cfg),
    )


def ensure_engines(
    rt: TrtRuntime, voice: Voice, cfg: Config, cpu_model: VoiceModel, progress: Progress
) -> tuple[TensorRTVoiceModel, dict[str, Any]]:
    """The voice on TensorRT from verified engines, building (and gating) what is missing.

    Returns the model and a report for ``health``: per part what the cache said
    and what was done, the precision in use, and ``rebuilt`` with the reason
    whenever a cached engine had to be replaced.
    """
    cache = EngineCache(engine_dir(cfg))
    precisions = ["fp16", "fp32"] if cfg.gpu.precision == "fp16" else ["fp32"]
    failures: list[str] = []
    report: dict[str, Any] = {"dir": str(cache.directory), "rebuilt": []}
    for precision in precisions:
        keys = _keys(rt, voice, cfg, precision)
        looks = {part: cache.lookup(key) for part, key in keys.items()}
        rejected = [f"{p}: {lk.reason}" for p, lk in looks.items() if lk.status == "rejected"]
        if rejected:
            failures.append(f"{precision} rejected earlier ({'; '.join(rejected)})")
            progress(f"{precision.upper()} engines failed the accuracy gate before; skipping")
            continue
        model = _try_cached(rt, looks, cfg)
        if model is not None:
            report.update(precision=precision, engines={p: "cached" for p in PARTS})
            progress(f"TensorRT engines loaded from {cache.directory} ({precision})")
            return model, report
        with cache.build_lock():
            # Another builder may have finished while this one waited for the lock.
            looks = {part: cache.lookup(key) for part, key in keys.items()}
            model = _try_cached(rt, looks, cfg)
            if model is not None:
                report.update(precision=precision, engines={p: "cached" for p in PARTS})
                return model, report
            model, snr = _build_and_gate(rt, voice, cfg, cpu_model, keys, looks, progress, report)
            if snr >= cfg.gpu.min_snr_db:
                report.update(precision=precision, snr_db=round(snr, 1))
                return model, report
            model.close()
            reason = f"SNR {snr:.1f} dB against the CPU backend < {cfg.gpu.min_snr_db:.1f} dB"
            failures.append(f"{precision}: {reason}")
            for key in keys.values():
                cache.reject(key, reason)
            log.warning("TensorRT %s engines rejected: %s", precision.upper(), reason)
    raise EngineBuildError(
        "TensorRT output does not match the CPU backend ("
        + "; ".join(failures)
        + "); refusing TensorRT and running on the CPU. Delete the engine cache to retry."
    )


def _try_cached(rt: TrtRuntime, looks: dict[str, Lookup], cfg: Config) -> TensorRTVoiceModel | None:
    if not all(lk.status == "hit" and lk.plan is not None for lk in looks.values()):
        return None
    plans = {part: lk.plan for part, lk in looks.items() if lk.plan is not None}
    try:
        return _load(rt, plans, cfg)
    except EngineLoadError as exc:
        for part in PARTS:  # the checksum matched, so TensorRT itself refused the plan
            looks[part] = Lookup("corrupt", reason=str(exc))
        return None


def _build_and_gate(
    rt: TrtRuntime,
    voice: Voice,
    cfg: Config,
    cpu_model: VoiceModel,
    keys: dict[str, EngineKey],
    looks: dict[str, Lookup],
    progress: Progress,
    report: dict[str, Any],
) -> tuple[TensorRTVoiceModel, float]:
    onnx = _onnx_paths(voice)
    ranges = _ranges(cfg)
    plans: dict[str, bytes] = {}
    actions: dict[str, str] = {}
    cache = EngineCache(engine_dir(cfg))
    for part, key in keys.items():
        look = looks[part]
        if look.status == "hit" and look.plan is not None:
            plans[part], actions[part] = look.plan, "cached"
            continue
        if look.status in ("mismatch", "corrupt"):
            log.warning("cached TensorRT %s engine unusable (%s): rebuilding", part, look.reason)
            report["rebuilt"].append(f"{part}: {look.status}: {look.reason}")
            actions[part] = "rebuilt"
        else:
            actions[part] = "built"
        progress(f"building TensorRT {part} engine ({key.precision}, range {ranges[part]})…")
        started = time.monotonic()
        plans[part] = build_engine(rt, onnx[part], precision=key.precision, dim_range=ranges[part])
        progress(f"built TensorRT {part} engine in {time.monotonic() - started:.1f} s")
    model = _load(rt, plans, cfg)
    try:
        snr = accuracy_snr_db(model, cpu_model, trt_backend.GATE_SENTENCES)
    except BackendError:
        model.close()
        raise
    progress(f"accuracy gate ({keys['encoder'].precision}): SNR {snr:.1f} dB vs the CPU backend")
    report["engines"] = actions
    if snr >= cfg.gpu.min_snr_db:
        for part, key in keys.items():
            if actions[part] != "cached":
                cache.store(key, plans[part], {"snr_db": round(snr, 2), "built_at": time.time()})
    return model, snr


def _gpu_present(nvml: Any | None, rt: TrtRuntime | None) -> bool:
    if nvml is not None:
        try:
            return int(nvml.nvmlDeviceGetCount()) > 0
        except nvml.NVMLError:
            return False
    return rt is not None and device_count(rt) > 0


def load_gpu_pool(
    voice: Voice,
    cpu_model: VoiceModel,
    cfg: Config,
    *,
    nvml_loader: Callable[[], Any | None] = nvml_seam.load,
    trt_loader: Callable[[], TrtRuntime | None] = trt_seam.load,
) -> tuple[VoiceModel, dict[str, Any]]:
    """The voice behind the failover pool, and a status dict for ``health``.

    ``backend: onnx-cpu`` returns ``cpu_model`` as is.  Otherwise the result is a
    :class:`FailoverVoiceModel` (its ``state()`` is the live view; the status
    dict is how start-up went).  Blocks while engines are built.
    """
    requested = cfg.engine.backend
    status: dict[str, Any] = {"backend": cpu_model.backend_name, "status": "ok"}
    status.update(requested=requested, gpu="absent", watchdog="off")
    if requested == "onnx-cpu":
        log.info("backend: %s (configured)", cpu_model.backend_name)
        return cpu_model, status
    nvml = nvml_loader()
    rt = trt_loader()

    def cpu_only(reason: str, degraded: bool) -> tuple[VoiceModel, dict[str, Any]]:
        if degraded:
            log.warning("GPU backend unavailable, running on the CPU: %s", reason)
            status.update(status="degraded", reason=reason)
        else:
            log.info("backend: %s (%s)", cpu_model.backend_name, reason)
        return FailoverVoiceModel(None, cpu_model), status

    if not _gpu_present(nvml, rt):
        if nvml is None:
            log.info("GPU watchdog disabled: NVML not available (no NVIDIA driver)")
        return cpu_only("no GPU", degraded=requested == "tensorrt")
    status["gpu"] = "present"
    if rt is None:
        return cpu_only("a GPU is present but TensorRT/cuda-python is not installed", True)
    try:
        model, engines = ensure_engines(rt, voice, cfg, cpu_model, lambda m: log.info("%s", m))
    except (EngineBuildError, EngineLoadError, BackendError, OSError) as exc:
        return cpu_only(str(exc), True)
    # The GPU's runs counted beside the CPU's (``stats.model_runs``, by part).
    meter = cpu_model.meter if isinstance(cpu_model, OnnxVoiceModel) else model.meter
    model.meter = meter
    status.update(backend=model.backend_name, gpu="ok", engines=engines)
    if engines.get("rebuilt"):
        status["engines_rebuilt"] = list(engines["rebuilt"])
    cache = EngineCache(engine_dir(cfg))
    keys = _keys(rt, voice, cfg, str(engines["precision"]))

    def reload() -> VoiceModel:
        looks = {part: cache.lookup(key) for part, key in keys.items()}
        bad = [f"{p}: {lk.reason}" for p, lk in looks.items() if lk.plan is None]
        if bad:
            raise EngineLoadError("; ".join(bad))
        again = _load(rt, {p: lk.plan for p, lk in looks.items() if lk.plan is not None}, cfg)
        again.meter = meter
        return again

    pool = FailoverVoiceModel(
        model, cpu_model, factory=reload, recovery_healthy_s=cfg.gpu.recovery_healthy_s
    )
    status["watchdog"] = _start_watchdog(pool, nvml, cfg)
    log.info(
        "backend: tensorrt on GPU %d (%s engines, watchdog %s)",
        cfg.gpu.device_index,
        engines["precision"],
        status["watchdog"],
    )
    return pool, status


def _start_watchdog(pool: FailoverVoiceModel, nvml: Any | None, cfg: Config) -> str:
    if not cfg.gpu.watchdog:
        log.warning("GPU watchdog disabled by configuration: a lost GPU is noticed only on error")
        return "disabled (config)"
    if nvml is None:
        log.info("GPU watchdog disabled: NVML not available (no NVIDIA driver)")
        return "disabled (no NVML)"
    watchdog = GpuWatchdog(
        nvml,
        cfg.gpu.device_index,
        cfg.gpu.watchdog_interval_ms / 1000.0,
        on_alarm=lambda a: pool.notify_alarm(a.kind, a.reason, a.time),
        on_reading=lambda r: pool.notify_health(r.healthy),
    )
    try:
        watchdog.start()
    except nvml.NVMLError as exc:
        log.warning("GPU watchdog could not start: %s", exc)
        return f"failed ({exc})"
    pool.attach_watchdog(watchdog)
    return "running"


def gpu_health(model: VoiceModel, status: dict[str, Any]) -> dict[str, Any]:
    """``status`` from start-up merged with the pool's live state, for ``health``/``stats``."""
    out = dict(status)
    if isinstance(model, FailoverVoiceModel):
        live = model.state()
        gpu = live.pop("gpu")
        if gpu != "absent":  # start-up knows better (a GPU may be present but unused)
            out["gpu"] = gpu
        out.update(live)
        if gpu in ("down", "recovering"):
            out["status"] = "degraded"
    return out


def prepare_engines(
    voice: Voice,
    cfg: Config,
    progress: Progress,
    *,
    trt_loader: Callable[[], TrtRuntime | None] = trt_seam.load,
    cpu_model: VoiceModel | None = None,
) -> None:
    """``ttsd prepare``: build and verify the engines now, under the build lock."""
    rt = trt_loader()
    if rt is None:
        log.info("TensorRT not installed: no GPU engines to prepare")
        return
    if device_count(rt) == 0:
        log.info("no CUDA device: no GPU engines to prepare")
        return
    if cpu_model is None:
        cpu_model = OnnxVoiceModel.load(
            voice.model_path, voice.encoder_path, voice.decoder_path, voice.cut, cpu_threads(cfg)
        )
    model, report = ensure_engines(rt, voice, cfg, cpu_model, progress)
    model.close()
    progress(f"TensorRT engines ready in {report['dir']} ({report['precision']})")
