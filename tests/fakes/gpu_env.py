"""A fake GPU box (CUDA + TensorRT + NVML fakes) and a config pointing at a temp engine cache."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from appliance.model.engine.base import VoiceModel, Window
from appliance.model.engine.gpu_select import load_gpu_pool
from appliance.model.engine.trt_seam import TrtRuntime
from appliance.ops.config import Config, parse_config
from appliance.speech import FloatArray
from tests.fakes.cudart import FakeCudart
from tests.fakes.gpu_nvml import FakeNvml
from tests.fakes.tensorrt import FakeTensorRT


@dataclass
class GpuEnv:
    cuda: FakeCudart
    trt: FakeTensorRT
    nvml: FakeNvml
    cfg: Config

    @property
    def rt(self) -> TrtRuntime:
        return TrtRuntime(trt=self.trt, cudart=self.cuda)

    def load(self, voice: Any, cpu: VoiceModel) -> tuple[VoiceModel, dict[str, Any]]:
        return load_gpu_pool(
            voice, cpu, self.cfg, nvml_loader=lambda: self.nvml, trt_loader=lambda: self.rt
        )


def gpu_env(engine_dir: Path, version: str = "10.3.0", **gpu: Any) -> GpuEnv:
    cuda = FakeCudart()
    cfg = parse_config({"gpu": {"engine_dir": str(engine_dir), **gpu}})
    return GpuEnv(cuda=cuda, trt=FakeTensorRT(cuda, version), nvml=FakeNvml(), cfg=cfg)


def stream_windows(
    model: VoiceModel, z: FloatArray, window: int = 32, context: int = 16, before: Any = None
) -> FloatArray:
    """Decode ``z`` as the streamer does: windows with context each side, trimmed."""
    frames = z.shape[2]
    pieces = []
    for i, start in enumerate(range(0, frames, window)):
        if before is not None:
            before(i)
        end = min(start + window, frames)
        left, right = max(0, start - context), min(frames, end + context)
        audio = model.decode(Window(z[:, :, left:right], None))
        hop = audio.shape[0] // (right - left)
        pieces.append(audio[(start - left) * hop : (end - left) * hop])
    return np.concatenate(pieces)
