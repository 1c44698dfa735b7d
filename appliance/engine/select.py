"""Which backend runs a voice."""

from __future__ import annotations

import os
from typing import Any

from appliance.config import Config
from appliance.engine.base import VoiceModel
from appliance.engine.onnx import OnnxVoiceModel
from appliance.voices import Voice


def cpu_threads(cfg: Config) -> int:
    """Intra-op threads per worker: the CPUs this process may use, shared by the workers."""
    if cfg.engine.intra_op_threads:
        return cfg.engine.intra_op_threads
    cpus = len(os.sched_getaffinity(0))
    return max(1, cpus // max(1, cfg.engine.workers))


def load_voice_model(voice: Voice, cfg: Config) -> tuple[VoiceModel, dict[str, Any]]:
    """The voice on the configured backend; the CPU model is always loaded (failover)."""
    cpu = OnnxVoiceModel.load(
        voice.model_path, voice.encoder_path, voice.decoder_path, voice.cut, cpu_threads(cfg)
    )
    if cfg.engine.backend == "onnx-cpu":
        return cpu, {"backend": "onnx-cpu", "status": "ok"}
    try:
        from appliance.engine.gpu_select import load_gpu_pool
    except ImportError:
        return cpu, {"backend": "onnx-cpu", "status": "ok", "note": "GPU support not installed"}
    model, status = load_gpu_pool(voice, cpu, cfg)
    return model, dict(status)
