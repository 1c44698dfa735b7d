"""Config: typed, validated in one place, errors name the key path."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.config import Config, ConfigError, flatten, load_config, parse_config


def test_defaults() -> None:
    cfg = parse_config({})
    assert cfg == Config()
    assert cfg.server.max_text_chars == 20000
    assert cfg.scheduler.watermark_ms == 400
    assert cfg.voices.default == "en_US-joe-medium"


@pytest.mark.parametrize(
    "data,message",
    [
        ({"playback": {"devcie": 1}}, "playback.devcie: unknown key (did you mean device?)"),
        ({"servr": {}}, "servr: unknown key (did you mean server?)"),
        ({"server": {"zzz": 1}}, "server.zzz: unknown key"),
        (
            {"server": {"max_text_chars": "many"}},
            "server.max_text_chars: expected an integer, got 'many'",
        ),
        (
            {"server": {"max_text_chars": 0}},
            "server.max_text_chars: 0 is out of range [1, 1000000]",
        ),
        (
            {"server": {"client_too_slow_s": True}},
            "server.client_too_slow_s: expected a number, got True",
        ),
        (
            {"engine": {"backend": "cuda"}},
            "engine.backend: must be one of auto, tensorrt, onnx-cpu, got 'cuda'",
        ),
        ({"server": {"allowed_uids": "0"}}, "server.allowed_uids: expected a list, got '0'"),
        (
            {"server": {"allowed_uids": [1, "x"]}},
            "server.allowed_uids[1]: expected an integer, got 'x'",
        ),
        ({"server": 5}, "server: expected a mapping, got 5"),
        ([1, 2], "<top>: expected a mapping, got [1, 2]"),
        (
            {"scheduler": {"watermark_ms": float("nan")}},
            "scheduler.watermark_ms: must be finite, got nan",
        ),
    ],
)
def test_errors_name_the_path(data: object, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    assert str(info.value) == message


def test_load_yaml(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text(
        "server:\n  max_text_chars: 100\n  allowed_gids: [10, 20]\nlogging:\n  level: debug\n"
    )
    cfg = load_config(p)
    assert cfg.server.max_text_chars == 100
    assert cfg.server.allowed_gids == (10, 20)
    assert flatten(cfg)["logging.level"] == "debug"


def test_bad_yaml_and_missing_file(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("server: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(p)
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")


def test_check_config_command(tmp_path: Path) -> None:
    from appliance.main import main

    good = tmp_path / "good.yaml"
    good.write_text("server:\n  max_connections: 10\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("playback:\n  devcie: 2\n")
    assert main(["check-config", str(good)]) == 0
    assert main(["check-config", str(bad)]) == 1
