"""Helpers of the stage tests: a job's worker context over a voice, clauses of a text,
the texts (the stages are called as functions, without a daemon)."""

from __future__ import annotations

from typing import Any

from appliance.core.chunkplan import mode_plan
from appliance.core.pipeline.encode import EncodeContext
from appliance.core.pipeline.types import JobSettings, VoiceRuntime
from appliance.model.engine.base import Scales
from appliance.ops.config import Config
from appliance.text.frontend import Clause, FrontendLimits, prepare

BARE = (
    "The maintenance crew will replace the broken escalator on the north side of the "
    "station before the morning rush begins tomorrow."
)
COMMITTEE = (  # espeak says "on a", "to review", "for the" as one word each
    "The committee met on a cold and windy morning to review the proposal for the new "
    "library building, which would replace the old reading room that had served the "
    "town for more than sixty years."
)


def context(voice: VoiceRuntime, crowded: bool = False, **settings: Any) -> EncodeContext:
    """A job's worker context, noise off (``settings``: :class:`JobSettings` fields)."""
    fields: dict[str, Any] = {
        "scales": Scales(0.0, voice.defaults.length_scale, 0.0),
        "speaker": None,
        "mode": "dialog",
        "realtime": True,
        "context": voice.context,
        "watermark_s": 0.05,
        "join_fade_ms": Config().streaming.join_fade_ms,
        **settings,
    }
    s = JobSettings(**fields)
    frame_ms = 1000.0 * voice.hop / voice.sample_rate
    fade = round(voice.sample_rate * s.join_fade_ms / 1000.0)
    return EncodeContext(voice, s, mode_plan(s.mode, frame_ms), frame_ms, fade, lambda: crowded)


def clause_of(text: str) -> Clause:
    (clause,) = prepare(text, "en_US", FrontendLimits(max_chars=2000, sentence_chars=400))
    return clause
