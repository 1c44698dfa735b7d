"""What a message asks ttsd for, as plain functions of the config, SET's settings and info
(the module process runs the same functions: tests/clients/speechd/test_module_pipe.py;
LIST VOICES' rows and NAME:SPEAKER: tests/clients/speechd/test_speakers_listed.py)."""

from __future__ import annotations

from typing import Any

import pytest

from appliance.clients.speechd.config import ModuleConfig, VoiceMapping
from appliance.clients.speechd.options import request_options, resolve_voice

INFO: dict[str, Any] = {
    "default_voice": "en_US-b",
    "voices": [
        {"name": "en_US-a", "language": "en_US"},
        {"name": "en_US-b", "language": "en_US"},
        {"name": "en_GB-c", "language": "en_GB"},
        {"name": "de_DE-d", "language": "de_DE", "speakers": ["x", "y"]},
        "not a voice",
    ],
}


@pytest.mark.parametrize(
    ("rate", "speed"), [(100, 4.0), (50, 2.0), (-100, 0.5), (-50, 0.707), (0, None)]
)
def test_rate_maps_onto_speed(rate: int, speed: float | None) -> None:
    opts = request_options(ModuleConfig(), {"rate": rate}, INFO)
    assert opts.get("speed") == speed


@pytest.mark.parametrize(("volume", "level"), [(100, 1.0), (0, 0.5), (-100, 0.0)])
def test_volume_maps_onto_level(volume: int, level: float) -> None:
    assert request_options(ModuleConfig(), {"volume": volume}, INFO)["volume"] == level


def test_the_fixed_fields_follow_the_config() -> None:
    opts = request_options(ModuleConfig(mode="reading", deterministic=False), {}, INFO)
    assert opts == {"format": "s16le", "mode": "reading"}  # no voice: the daemon's default
    assert request_options(ModuleConfig(), {}, INFO)["deterministic"] is True


def test_a_synthesis_voice_with_a_speaker_asks_for_both() -> None:
    opts = request_options(ModuleConfig(), {"synthesis_voice": "de_DE-d:y"}, INFO)
    assert (opts["voice"], opts["speaker"]) == ("de_DE-d", "y")
    opts = request_options(ModuleConfig(), {"synthesis_voice": "gone:y"}, INFO)
    assert "voice" not in opts and "speaker" not in opts  # no such voice: no speaker either


@pytest.mark.parametrize(
    ("cfg", "settings", "voice"),
    [
        (ModuleConfig(), {"synthesis_voice": "en_GB-c", "language": "de"}, "en_GB-c"),
        (ModuleConfig(), {"language": "en-GB"}, "en_GB-c"),  # the exact language first
        (ModuleConfig(), {"language": "en-AU"}, "en_US-b"),  # then its base: daemon's default
        (ModuleConfig(default_voice="en_US-a"), {"language": "en"}, "en_US-a"),
        (ModuleConfig(default_voice="en_US-a"), {"language": "fr"}, "en_US-a"),
        (ModuleConfig(default_voice="gone"), {"language": "fr"}, None),
        (
            ModuleConfig(voices=(VoiceMapping("en", "FEMALE1", "en_GB-c"),)),
            {"language": "en", "voice": "FEMALE1"},
            "en_GB-c",
        ),
    ],
)
def test_the_voice_chosen(cfg: ModuleConfig, settings: dict[str, Any], voice: str | None) -> None:
    assert resolve_voice(cfg, settings, INFO) == voice
