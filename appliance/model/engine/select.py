"""Which backend runs a voice."""

from __future__ import annotations

from typing import Any

from appliance.model.engine.base import VoiceModel
from appliance.model.engine.gpu_select import load_gpu_pool
from appliance.model.engine.onnx import OnnxVoiceModel
from appliance.model.engine.threads import CpuPlan
from appliance.ops.config import Config
from appliance.ops.meter import RunMeter
from appliance.voicetypes import Voice


def load_voice_model(
    voice: Voice, cfg: Config, plan: CpuPlan, meter: RunMeter | None = None
) -> tuple[VoiceModel, dict[str, Any]]:
    """The voice on the configured backend; the CPU model is always loaded (failover).
    ``plan``: its sessions' threads and where their pool threads run (the runtime's one
    plan, which also places the scheduler's workers).  ``meter``: where the CPU model
    counts its runs."""
    cpu = OnnxVoiceModel.load(
        voice.model_path,
        voice.encoder_path,
        voice.margin_decoder_path or voice.decoder_path,
        voice.cut,
        plan.threads,
        plan.spin,
        flow=voice.flow_split,
        lean_decoder=voice.lean_decoder_path,
        pool_cpus=plan.pins.pool if plan.pins is not None else (),
        meter=meter,
    )
    if cfg.engine.backend == "onnx-cpu":
        return cpu, {"backend": "onnx-cpu", "status": "ok"}
    model, status = load_gpu_pool(voice, cpu, cfg)
    return model, dict(status)
