"""Which backend runs a voice."""

from __future__ import annotations

from typing import Any

from appliance.config import Config
from appliance.engine.base import VoiceModel
from appliance.engine.gpu_select import load_gpu_pool
from appliance.engine.onnx import OnnxVoiceModel
from appliance.engine.threads import cpu_threads, pinning, spin_wait
from appliance.voicetypes import Voice


def load_voice_model(voice: Voice, cfg: Config) -> tuple[VoiceModel, dict[str, Any]]:
    """The voice on the configured backend; the CPU model is always loaded (failover)."""
    threads = cpu_threads(cfg)
    pins = pinning(cfg, threads)
    cpu = OnnxVoiceModel.load(
        voice.model_path,
        voice.encoder_path,
        voice.margin_decoder_path or voice.decoder_path,
        voice.cut,
        threads,
        spin_wait(cfg, threads),
        flow=voice.flow_split,
        lean_decoder=voice.lean_decoder_path,
        pool_cpus=pins.pool if pins is not None else (),
    )
    if cfg.engine.backend == "onnx-cpu":
        return cpu, {"backend": "onnx-cpu", "status": "ok"}
    model, status = load_gpu_pool(voice, cpu, cfg)
    return model, dict(status)
