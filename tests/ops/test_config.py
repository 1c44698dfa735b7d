"""Config: typed, validated in one place, errors name the key path."""

from __future__ import annotations

import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from appliance.ops.config import (
    MAX_CONFIG_BYTES,
    Config,
    ConfigError,
    flatten,
    load_config,
    parse_config,
)


def test_defaults() -> None:
    cfg = parse_config({})
    assert cfg == Config()
    assert cfg.limits.max_text_chars == 20000
    assert cfg.scheduler.watermark_ms == 400
    assert cfg.voices.default == "en_US-joe-medium"


@pytest.mark.parametrize(
    "data,message",
    [
        ({"playback": {"devcie": 1}}, "playback.devcie: unknown key (did you mean device?)"),
        ({"limit": {}}, "limit: unknown key (did you mean limits?)"),
        ({"limits": {"zzz": 1}}, "limits.zzz: unknown key"),
        (
            {"limits": {"max_text_chars": "many"}},
            "limits.max_text_chars: expected an integer, got 'many'",
        ),
        (
            {"limits": {"max_text_chars": 0}},
            "limits.max_text_chars: 0 is out of range [1, 1000000]",
        ),
        (
            {"limits": {"client_too_slow_s": True}},
            "limits.client_too_slow_s: expected a number, got True",
        ),
        (
            {"engine": {"backend": "cuda"}},
            "engine.backend: must be one of auto, tensorrt, onnx-cpu, got 'cuda'",
        ),
        ({"v1": {"allowed_uids": "0"}}, "v1.allowed_uids: expected a list, got '0'"),
        (
            {"v1": {"allowed_uids": [1, "x"]}},
            "v1.allowed_uids[1]: expected an integer, got 'x'",
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
    assert cfg.limits.max_text_chars == 100
    assert cfg.v1.allowed_gids == (10, 20)
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


def _alias_bomb() -> bytes:
    """Nine levels of nine aliases: 325 bytes that stand for 9**9 (387 million) strings."""
    levels = ["&a [" + ",".join(["lol"] * 9) + "]"]
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        levels.append(f"&{name} [" + ",".join([f"*{prev}"] * 9) + "]")
    return ("server:\n  socket: [" + ", ".join(levels) + "]\n").encode()


def test_alias_bomb_is_refused_quickly_with_a_short_message(tmp_path: Path) -> None:
    # In a child with 1 GiB of address space: expanding the bomb (repr in an error message)
    # needs gigabytes; refusing it needs nothing.
    bomb = tmp_path / "bomb.yaml"
    bomb.write_bytes(_alias_bomb())
    assert len(bomb.read_bytes()) <= 363
    limit = 1 << 30
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "appliance.main", "check-config", str(bomb)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
    )
    elapsed = time.monotonic() - start
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "anchors (&a) are not allowed (line 2" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr) < 500
    assert elapsed < 60  # sanity only: the old parser took 28 s and 1.7 GB


@pytest.mark.parametrize(
    "text,message",
    [
        ("server:\n  socket: *nowhere\n", "aliases (*nowhere) are not allowed (line 2"),
        ("server: &s {}\n", "anchors (&s) are not allowed (line 1"),
        (
            "server:\n  max_connections: 1\n  max_connections: 2\n",
            "duplicate key max_connections (line 3, column 3)",
        ),
        ("server: {}\nlogging: {}\nserver: {}\n", "duplicate key server (line 3, column 1)"),
        ("x: " + "[" * 100_000 + "]" * 100_000 + "\n", "nested deeper than 32 levels"),
        ("".join(" " * i + f"k{i}:\n" for i in range(200)), "nested deeper than 32 levels"),
    ],
)
def test_refused_yaml_says_why(tmp_path: Path, text: str, message: str) -> None:
    p = tmp_path / "c.yaml"
    p.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(p)
    assert message in str(info.value)
    assert str(info.value).startswith(f"{p}: ")


def test_invalid_utf8_is_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from appliance.main import main

    p = tmp_path / "c.yaml"
    p.write_bytes(b"server:\n  socket: caf\xe9\n")
    assert main(["check-config", str(p)]) == 1
    err = capsys.readouterr().err
    assert "not UTF-8 (byte 0xe9 at offset 21, line 2)" in err


def test_config_file_size_is_capped(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("# padding\n" * (MAX_CONFIG_BYTES // 10 + 1))
    with pytest.raises(ConfigError, match=f"larger than {MAX_CONFIG_BYTES} bytes"):
        load_config(p)
    p.write_text("# padding\n" * (MAX_CONFIG_BYTES // 10 - 1))
    assert load_config(p) == Config()


@pytest.mark.parametrize(
    "data",
    [
        {"v1": {"socket": ["x" * 100_000] * 100}},
        {"v1": {"socket": {"k" * 100_000: "v"}}},
        {"limits": {"max_connections": "9" * 500_000}},
        {"v1": {"allowed_uids": [*range(100_000), "x"]}},
        {"v1": {"allowed_uids": [[[[[[["deep"]]]]]]]}},
        {"limits": {"z" * 500_000: 1}},
        {"z" * 500_000: 1},
        {"playback": {"latency": "s" * 500_000}},
        {"gpu": {"decoder_frames": list(range(100_000))}},
    ],
)
def test_messages_never_carry_unbounded_values(data: object) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(data)
    assert len(str(info.value)) < 200, str(info.value)[:300]


def test_an_old_key_name_is_still_read(caplog: pytest.LogCaptureFixture) -> None:
    """``streaming.clause_chars`` (before whole sentences) is read as max_sentence_chars."""
    cfg = parse_config({"streaming": {"clause_chars": 300}})
    assert cfg.streaming.max_sentence_chars == 300
    assert "streaming.clause_chars is now streaming.max_sentence_chars" in caplog.text
    with pytest.raises(ConfigError, match="give only max_sentence_chars"):
        parse_config({"streaming": {"clause_chars": 300, "max_sentence_chars": 400}})
    # Whole sentences by default; the latency cut is off unless asked for.
    assert Config().streaming.max_sentence_chars >= 400
    assert Config().streaming.first_clause_chars == 0


def test_a_config_from_before_the_split_of_server_is_read(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``server:`` held v1's socket and every door's limits; each key is read where it
    lives now (``v1.*``, ``limits.*``), with a warning, and both at once is refused."""
    cfg = parse_config({"server": {"socket": "/tmp/x.sock", "max_text_chars": 99}})
    assert cfg.v1.socket == "/tmp/x.sock" and cfg.limits.max_text_chars == 99
    assert "server.socket is now v1.socket" in caplog.text
    assert "server.max_text_chars is now limits.max_text_chars" in caplog.text
    with pytest.raises(ConfigError, match=r"also given as limits\.max_text_chars"):
        parse_config({"server": {"max_text_chars": 1}, "limits": {"max_text_chars": 2}})


def test_every_problem_of_a_file_is_reported_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``check-config`` stopped at the first bad key; each one is a line now."""
    from appliance.main import main

    p = tmp_path / "c.yaml"
    p.write_text(
        "limits:\n  max_text_chars: 0\n  max_conections: 5\n"
        "wyoming:\n  uri: udp://x:1\nplayback:\n  latency: soon\n"
    )
    with pytest.raises(ConfigError) as info:
        load_config(p)
    assert info.value.problems == [
        "limits.max_text_chars: 0 is out of range [1, 1000000]",
        "limits.max_conections: unknown key (did you mean max_connections?)",
        "wyoming.uri: want tcp://HOST:PORT or unix://PATH, got 'udp://x:1'",
        "playback.latency: must be low, high or seconds, got 'soon'",
    ]
    assert str(info.value).endswith("(and 3 more)")
    assert main(["check-config", str(p)]) == 1
    err = capsys.readouterr().err
    for problem in info.value.problems:
        assert f"ttsd: {problem}\n" in err


def test_flags_are_a_layer_over_the_file(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("http:\n  listen: 127.0.0.1:1\nwyoming:\n")
    flags = {
        "http.listen": ("--http", "127.0.0.1:2"),
        "wyoming.uri": ("--wyoming", "tcp://0.0.0.0:10200"),
        "wyoming.allowed_networks": ("--wyoming-allow", ["192.168.1.0/24"]),
    }
    cfg = load_config(p, flags)
    assert cfg.http.listen == "127.0.0.1:2"
    assert cfg.wyoming.uri == "tcp://0.0.0.0:10200"
    assert cfg.wyoming.allowed_networks == ("192.168.1.0/24",)
    assert load_config(p, flags) == cfg  # read again: the same config, as a reload sees it
    bad = {"wyoming.allowed_networks": ("--wyoming-allow", ["192.168.1.0/24", "lan"])}
    with pytest.raises(ConfigError) as info:
        load_config(p, bad)
    assert str(info.value).startswith("--wyoming-allow: wyoming.allowed_networks[1]: ")


def test_live_keys_are_the_fields_marked_live_and_the_example_says_which() -> None:
    """A reload changes the keys whose field metadata says ``live``; the example config
    marks the same ones ``[live]``."""
    from appliance.ops.config import live_keys

    example = (Path(__file__).parents[2] / "systemd/config.example.yaml").read_text()
    # A comment with a line that begins "[live]" marks the key lines after it.
    marked, section, live, in_comment = set(), "", False, False
    for line in example.splitlines():
        if m := re.fullmatch(r"([a-z_0-9]+):", line):
            section, live, in_comment = m.group(1), False, False
        elif m := re.match(r"\s+#?([a-z_]+):", line):
            in_comment = False
            if live:
                marked.add(f"{section}.{m.group(1)}")
        elif line.startswith("  #"):
            live = (live and in_comment) or line.lstrip().startswith("# [live]")
            in_comment = True
    assert live_keys() == marked
    assert {"limits.max_text_chars", "logging.level", "voices.lexicon"} <= live_keys()
    assert "wyoming.uri" not in live_keys() and "http.listen" not in live_keys()
