"""``ttsd voices add|remove``, a running daemon taking the change on SIGHUP, and
``ttsd check-config`` refusing what ``serve`` would refuse, without loading a voice."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from appliance.client import Client
from tests.conftest import Daemon, DaemonFactory
from tests.fixtures import GERMAN, MULTI, voice_path


def _ttsd(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "appliance.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _config(tmp: Path, voices: Path, cache: Path, **extra: Any) -> Path:
    cfg = {"voices": {"voices_dir": str(voices), "cache_dir": str(cache)}, **extra}
    path = tmp / "config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _names(d: Daemon) -> set[str]:
    with Client(d.socket) as c:
        return {v["name"] for v in c.request("info")["voices"]}


def _until(d: Daemon, want: set[str], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while _names(d) != want:
        assert d.alive() and time.monotonic() < deadline, (_names(d), d.log()[-3000:])
        time.sleep(0.2)


def test_a_voice_added_and_removed_is_taken_up_on_sighup(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    voices = tmp_path / "voices"
    voices.mkdir()
    d = daemon_factory({"voices": {"voices_dir": str(voices)}}, timeout=900)
    assert _names(d) == {"en_US-joe-medium"}
    # A cache of its own: in the shared one another test may have cut this voice already,
    # and a cached cut is taken without the progress line this checks.
    cfg = _config(tmp_path, voices, tmp_path / "cache")
    added = _ttsd("voices", "--config", str(cfg), "add", str(voice_path(GERMAN)))
    assert added.returncode == 0, added.stderr
    assert f"preparing {GERMAN} for streaming (first start only" in added.stderr + added.stdout
    assert f"{GERMAN}: added, streaming (de_DE)" in added.stdout
    assert sorted(p.name for p in voices.iterdir()) == [f"{GERMAN}.onnx", f"{GERMAN}.onnx.json"]
    os.kill(d.proc.pid, signal.SIGHUP)
    _until(d, {"en_US-joe-medium", GERMAN})
    assert f"voice {GERMAN} added" in d.log()
    with Client(d.socket) as c:
        assert c.synthesize_all("Guten Morgen.", voice=GERMAN).audio
    again = _ttsd("voices", "--config", str(cfg), "add", str(voice_path(GERMAN)))
    assert again.returncode == 1 and "exists already" in again.stderr
    gone = _ttsd("voices", "remove", GERMAN, "--config", str(cfg))
    assert gone.returncode == 0, gone.stderr
    assert list(voices.iterdir()) == []
    os.kill(d.proc.pid, signal.SIGHUP)
    _until(d, {"en_US-joe-medium"})


def test_a_file_that_is_no_voice_is_refused_with_the_reason_and_nothing_left(
    voice_cache: Path, tmp_path: Path
) -> None:
    voices = tmp_path / "voices"
    cfg = _config(tmp_path, voices, voice_cache)
    src = tmp_path / "src"
    src.mkdir()
    data = voice_path(MULTI).read_bytes()
    (src / "en_US-half-x_low.onnx").write_bytes(data[: len(data) // 2])
    shutil.copyfile(f"{voice_path(MULTI)}.json", src / "en_US-half-x_low.onnx.json")
    r = _ttsd("voices", "--config", str(cfg), "add", str(src / "en_US-half-x_low.onnx"))
    assert r.returncode == 1 and "not an ONNX model" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert not voices.exists() or list(voices.iterdir()) == []
    bad_json = src / "en_US-cfg-x_low.onnx"
    shutil.copyfile(voice_path(MULTI), bad_json)
    Path(f"{bad_json}.json").write_text(json.dumps({"audio": {}}))
    r = _ttsd("voices", "--config", str(cfg), "add", str(bad_json))
    assert r.returncode == 1 and "bad config" in r.stderr, r.stderr


def _check(tmp: Path, voices: Path, cache: Path, **extra: Any) -> subprocess.CompletedProcess[str]:
    return _ttsd("check-config", str(_config(tmp, voices, cache, **extra)), timeout=120)


def test_check_config_refuses_what_serve_would(voice_cache: Path, tmp_path: Path) -> None:
    voices = tmp_path / "voices"
    voices.mkdir()
    shutil.copyfile(voice_path(GERMAN), voices / f"{GERMAN}.onnx")
    shutil.copyfile(f"{voice_path(GERMAN)}.json", voices / f"{GERMAN}.onnx.json")
    ok = _check(tmp_path, voices, voice_cache)
    assert ok.returncode == 0 and ": ok" in ok.stdout, ok.stderr
    cfg = {"voices_dir": str(voices), "cache_dir": str(voice_cache), "default": "de_XX-nobody"}
    path = tmp_path / "c2.yaml"
    path.write_text(yaml.safe_dump({"voices": cfg}))
    r = _ttsd("check-config", str(path), timeout=120)
    assert r.returncode == 1 and "voices.default: voice 'de_XX-nobody' not found" in r.stderr
    (voices / "en_US-cut-x_low.onnx").write_bytes(voice_path(GERMAN).read_bytes()[:5000])
    shutil.copyfile(f"{voice_path(GERMAN)}.json", voices / "en_US-cut-x_low.onnx.json")
    r = _check(tmp_path, voices, voice_cache)
    assert r.returncode == 1 and "en_US-cut-x_low.onnx" in r.stderr and "Traceback" not in r.stderr
    (voices / "en_US-cut-x_low.onnx").unlink()
    r = _check(tmp_path, voices, voice_cache, http={"listen": "0.0.0.0:8880"})
    assert r.returncode == 1 and "not loopback and no API key" in r.stderr, r.stderr
    r = _check(tmp_path, voices, voice_cache, http={"listen": "0.0.0.0:8880", "api_key": "k"})
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("voice", [GERMAN])
def test_check_config_loads_no_voice(voice: str, voice_cache: Path, tmp_path: Path) -> None:
    """It reads the pair's headers only: no cut lands in a fresh cache."""
    voices = tmp_path / "voices"
    voices.mkdir()
    shutil.copyfile(voice_path(voice), voices / f"{voice}.onnx")
    shutil.copyfile(f"{voice_path(voice)}.json", voices / f"{voice}.onnx.json")
    cache = tmp_path / "fresh-cache"
    r = _check(tmp_path, voices, cache)
    assert r.returncode == 0, r.stderr
    assert not cache.exists() or not any(cache.iterdir())


def test_prepare_says_what_it_is_doing_in_one_line_per_voice(
    voice_cache: Path, tmp_path: Path
) -> None:
    """``ttsd prepare`` on a cache without the German voice's cut (the others copied from the
    session's cache, so only it is cut here): one line before, one after, nothing technical."""
    from appliance.model.voices import sha256_of

    voices = tmp_path / "voices"
    voices.mkdir()
    shutil.copyfile(voice_path(GERMAN), voices / f"{GERMAN}.onnx")
    shutil.copyfile(f"{voice_path(GERMAN)}.json", voices / f"{GERMAN}.onnx.json")
    cache = tmp_path / "cache"
    shutil.copytree(voice_cache, cache)
    for slot in cache.glob(f"{sha256_of(voice_path(GERMAN))[:32]}-*"):
        shutil.rmtree(slot)
    r = _ttsd("prepare", "--config", str(_config(tmp_path, voices, cache)), timeout=900)
    assert r.returncode == 0, r.stderr
    out = r.stdout + r.stderr
    assert f"preparing {GERMAN} for streaming (first start only, about " in out
    assert f"{GERMAN} ready in " in out and f"{GERMAN}: streaming" in out
    assert "max abs difference" not in out
