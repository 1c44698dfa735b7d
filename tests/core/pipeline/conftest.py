"""The bundled voice as the daemon loads it (``runtime.load_one``): the stage tests call
the pipeline's stages on it as functions, without a daemon."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.core.pipeline.types import VoiceRuntime
from appliance.core.runtime import load_one
from appliance.model.engine.threads import cpu_plan
from appliance.model.voices import bundled_voice_path
from appliance.ops.config import parse_config
from appliance.ops.cpuquota import cpu_quota


@pytest.fixture(scope="module")
def voice(voice_cache: Path) -> Iterator[VoiceRuntime]:
    cfg = parse_config(
        {
            "voices": {"cache_dir": str(voice_cache)},
            "engine": {"workers": 1, "intra_op_threads": 2},
        }
    )
    plan = cpu_plan(cfg, cpu_quota(), pin=False)
    runtime, _ = load_one("en_US-joe-medium", bundled_voice_path(), voice_cache, cfg, plan)
    yield runtime
    runtime.model.close()
