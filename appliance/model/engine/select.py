"""Which backend runs a voice."""

from __future__ import annotations

from typing import Any

from appliance.model.engine.base import VoiceModel
from appliance.model.engine.gpu_select import load_gpu_pool
from appliance.model.engine.onnx import OnnxVoiceModel
from appliance.model.engine.threads import Pinning, cpu_threads, spin_wait
from appliance.ops.config import Config
from appliance.ops.cpuquota import usable_cpus
from appliance.ops.meter import RunMeter
from appliance.voicetypes import Voice


def load_voice_model(
    voice: Voice, cfg: Config, pins: Pinning | None, meter: RunMeter | None = None
) -> tuple[VoiceModel, dict[str, Any]]:
    """The voice on the configured backend; the CPU model is always loaded (failover).
    ``pins``: where the sessions' pool threads run (the runtime's one plan, which also
    places the scheduler's workers).  ``meter``: where the CPU model counts its runs."""
    cpus = usable_cpus()  # read once for both (a few files of /proc and the cgroup tree)
    threads = cpu_threads(cfg, cpus)
    cpu = OnnxVoiceModel.load(
        voice.model_path,
        voice.encoder_path,
        voice.margin_decoder_path or voice.decoder_path,
        voice.cut,
        threads,
        spin_wait(cfg, threads, cpus),
        flow=voice.flow_split,
        lean_decoder=voice.lean_decoder_path,
        pool_cpus=pins.pool if pins is not None else (),
        meter=meter,
    )
    if cfg.engine.backend == "onnx-cpu":
        return cpu, {"backend": "onnx-cpu", "status": "ok"}
    model, status = load_gpu_pool(voice, cpu, cfg)
    return model, dict(status)
