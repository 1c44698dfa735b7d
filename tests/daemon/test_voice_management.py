"""``ttsd voices add|remove``, a running daemon taking the change on SIGHUP, and
``ttsd check-config`` refusing what ``serve`` would refuse, without loading a voice."""

from __future__ import annotations

import json
import os
import resource
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
from tests.fixtures import GERMAN, MULTI, voice_copy, voice_path


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
    # The 2-D decoder's blocked graph for this machine is made now, not at the first start.
    (slot,) = cache.glob(f"{sha256_of(voice_path(GERMAN))[:32]}-*")
    assert len(list(slot.glob("decoder2d.blocked-*.onnx"))) == 1


BAD_CONFIGS = {
    "en_US-neg-x_low": {"audio.sample_rate": -22050},
    "en_US-huge-x_low": {"audio.sample_rate": 10**9},
    "en_US-mute-x_low": {"inference.length_scale": 0},
    "en_US-eve-x_low": {"speaker_id_map": {"alice": 0, "eve": 7}},
    "en_US-more-x_low": {"num_speakers": 8},
}


def _skip_lines(d: Daemon, name: str) -> list[str]:
    return [ln for ln in d.log().splitlines() if f"voice {name} (" in ln and "skipped" in ln]


def test_voice_configs_out_of_range_are_skipped_in_one_line_and_never_served(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """`sample_rate: -22050` was served (v1 audio_ms -1091, HTTP 500 with a traceback), a
    speaker beyond the model's too (an ONNX Runtime traceback per request).  Checked in one
    place: start, reload, `voices add` and `check-config` refuse the same."""
    voices = tmp_path / "voices"
    voices.mkdir()
    for name, over in BAD_CONFIGS.items():
        voice_copy(voices, name, **over)
    (voices / "en_US-cut-x_low.onnx").write_bytes(voice_path(MULTI).read_bytes()[:5000])
    shutil.copyfile(f"{voice_path(MULTI)}.json", voices / "en_US-cut-x_low.onnx.json")
    d = daemon_factory({"voices": {"voices_dir": str(voices)}})
    assert _names(d) == {"en_US-joe-medium"}
    with Client(d.socket) as c:
        skipped = {Path(s["file"]).name for s in c.request("info")["voices_skipped"]}
    assert skipped == {f"{n}.onnx" for n in [*BAD_CONFIGS, "en_US-cut-x_low"]}
    for name in [*BAD_CONFIGS, "en_US-cut-x_low"]:
        assert len(_skip_lines(d, name)) == 1, (name, d.log()[-3000:])
    assert "audio.sample_rate -22050 is out of range" in _skip_lines(d, "en_US-neg-x_low")[0]
    assert "num_speakers 8: the model has 4" in _skip_lines(d, "en_US-more-x_low")[0]
    # A reload tries them again and says nothing new: each was logged once (the same files
    # were logged again at every SIGHUP before).
    os.kill(d.proc.pid, signal.SIGHUP)
    deadline = time.monotonic() + 120
    while "voices: no change" not in d.log():
        assert d.alive() and time.monotonic() < deadline, d.log()[-3000:]
        time.sleep(0.1)
    for name in [*BAD_CONFIGS, "en_US-cut-x_low"]:
        assert len(_skip_lines(d, name)) == 1, (name, d.log()[-3000:])
    assert _names(d) == {"en_US-joe-medium"}
    # check-config and voices add refuse each, with the same reason.
    cfg = _config(tmp_path, voices, tmp_path / "cache")
    r = _ttsd("check-config", str(cfg), timeout=120)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    for name in BAD_CONFIGS:
        assert f"{name}: bad config: " in r.stderr, r.stderr
    src, other = tmp_path / "src", tmp_path / "other"
    src.mkdir()
    cfg = _config(tmp_path, other, tmp_path / "cache")
    for name, why in (
        ("en_US-neg-x_low", "audio.sample_rate -22050 is out of range"),
        ("en_US-eve-x_low", "speaker_id_map 'eve': 7 is not a speaker"),
    ):
        model = voice_copy(src, name, **BAD_CONFIGS[name])
        r = _ttsd("voices", "--config", str(cfg), "add", str(model))
        assert r.returncode == 1 and why in r.stderr, r.stderr
    assert not other.exists() or not any(other.iterdir())


def _fsize_cap() -> None:
    """Written files capped at 64 MiB: a copy of /dev/zero ends, here, instead of filling
    the disk (what `voices add` did before)."""
    cap = 64 << 20
    resource.setrlimit(resource.RLIMIT_FSIZE, (cap, cap))


def test_voices_add_copies_regular_files_only_within_their_caps(tmp_path: Path) -> None:
    voices = tmp_path / "voices"
    cfg = _config(tmp_path, voices, tmp_path / "cache")
    src = tmp_path / "src"
    src.mkdir()
    zero = src / "en_US-zero-x_low.onnx"
    zero.symlink_to("/dev/zero")
    shutil.copyfile(f"{voice_path(MULTI)}.json", f"{zero}.json")
    r = subprocess.run(
        [sys.executable, "-m", "appliance.main", "voices", "--config", str(cfg), "add", str(zero)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_fsize_cap,
    )
    assert r.returncode == 1 and "not a regular file" in r.stderr, (r.returncode, r.stderr)
    assert not voices.exists() or not any(voices.iterdir())
    big = src / "en_US-big-x_low.onnx"
    with big.open("wb") as f:  # sparse: no disk used
        f.truncate(3 << 30)
    shutil.copyfile(f"{voice_path(MULTI)}.json", f"{big}.json")
    r = _ttsd("voices", "--config", str(cfg), "add", str(big), timeout=120)
    assert r.returncode == 1 and "larger than 2147483648 bytes" in r.stderr, r.stderr
    assert not voices.exists() or not any(voices.iterdir())


def test_removing_the_bundled_voice_says_it_is_bundled(tmp_path: Path) -> None:
    cfg = _config(tmp_path, tmp_path / "voices", tmp_path / "cache")
    r = _ttsd("voices", "--config", str(cfg), "remove", "en_US-joe-medium", timeout=120)
    assert r.returncode == 1
    assert "en_US-joe-medium is the bundled voice: it cannot be removed" in r.stderr, r.stderr


@pytest.mark.timeout(300)
def test_a_fifo_in_voices_dir_neither_wedges_the_reload_nor_the_stop(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """A model that blocks on open (a FIFO; a hung network mount alike) wedged the reload
    for good, and SIGTERM then never stopped the daemon."""
    voices = tmp_path / "voices"
    voices.mkdir()
    d = daemon_factory({"voices": {"voices_dir": str(voices)}})
    os.mkfifo(voices / "en_US-fifo-x_low.onnx")
    shutil.copyfile(f"{voice_path(MULTI)}.json", voices / "en_US-fifo-x_low.onnx.json")
    os.kill(d.proc.pid, signal.SIGHUP)
    deadline = time.monotonic() + 120
    while not _skip_lines(d, "en_US-fifo-x_low"):
        assert d.alive() and time.monotonic() < deadline, d.log()[-3000:]
        time.sleep(0.1)
    assert "not a regular file" in _skip_lines(d, "en_US-fifo-x_low")[0]
    # The reload finished: the next one runs (and adds a voice copied in meanwhile).
    shutil.copyfile(voice_path(MULTI), voices / f"{MULTI}.onnx")
    shutil.copyfile(f"{voice_path(MULTI)}.json", voices / f"{MULTI}.onnx.json")
    os.kill(d.proc.pid, signal.SIGHUP)
    _until(d, {"en_US-joe-medium", MULTI})
    t0 = time.monotonic()
    assert d.stop(timeout=30) == 0
    assert time.monotonic() - t0 < 20
    assert "Traceback" not in d.log()
