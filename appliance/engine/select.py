"""Which backend runs a voice."""

from __future__ import annotations

import os
from typing import Any

from appliance.config import Config
from appliance.engine.base import VoiceModel
from appliance.engine.onnx import OnnxVoiceModel
from appliance.voices import Voice


def cpu_threads(cfg: Config) -> int:
    """Intra-op threads per worker: by default every CPU this process may use.

    A lone request then gets the whole machine (short command: 42 ms to first packet
    instead of 59 with one thread); when both workers are busy the threads share the
    cores without spin-waiting (see ``load_voice_model``).
    """
    if cfg.engine.intra_op_threads:
        return cfg.engine.intra_op_threads
    return max(1, len(os.sched_getaffinity(0)))


def load_voice_model(voice: Voice, cfg: Config) -> tuple[VoiceModel, dict[str, Any]]:
    """The voice on the configured backend; the CPU model is always loaded (failover)."""
    threads = cpu_threads(cfg)
    # By default spin only when all workers' threads together fit on the CPUs we may use.
    spin = {
        "on": True,
        "off": False,
        "auto": threads > 1 and threads * cfg.engine.workers <= len(os.sched_getaffinity(0)),
    }[cfg.engine.spin_wait]
    cpu = OnnxVoiceModel.load(
        voice.model_path,
        voice.encoder_path,
        voice.decoder_path,
        voice.cut,
        threads,
        spin,
        flow=voice.flow_split,
    )
    if cfg.engine.backend == "onnx-cpu":
        return cpu, {"backend": "onnx-cpu", "status": "ok"}
    # gpu_select imports select (cpu_threads): imported here, not at the top.
    from appliance.engine.gpu_select import load_gpu_pool

    model, status = load_gpu_pool(voice, cpu, cfg)
    return model, dict(status)
