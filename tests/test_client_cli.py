"""The client library and ttsctl against the real daemon."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import wave
from pathlib import Path

import pytest

from appliance.client import AsyncClient, Client, TtsdError
from tests.conftest import Daemon


def _ttsctl(
    daemon: Daemon, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "appliance.ctl", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


def test_ttsctl_synth_writes_wav(daemon: Daemon, tmp_path: Path) -> None:
    out = tmp_path / "hello.wav"
    r = _ttsctl(daemon, "--socket", daemon.socket, "synth", "Hello there.", "-o", str(out))
    assert r.returncode == 0, r.stderr
    with wave.open(str(out)) as w:
        assert w.getframerate() == 22050 and w.getnchannels() == 1 and w.getsampwidth() == 2
        assert w.getnframes() > 22050 * 0.3


def test_ttsctl_reads_stdin_and_env_socket(daemon: Daemon, tmp_path: Path) -> None:
    out = tmp_path / "stdin.wav"
    r = subprocess.run(
        [sys.executable, "-m", "appliance.ctl", "synth", "-", "-o", str(out)],
        input="From standard input.",
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TTSD_SOCKET": daemon.socket},
    )
    assert r.returncode == 0, r.stderr
    assert out.stat().st_size > 44


@pytest.mark.parametrize(
    "cmd,needle",
    [("info", "en_US-joe-medium"), ("health", "ok"), ("ping", "pong"), ("stats", "ttfp_ms")],
)
def test_ttsctl_queries(daemon: Daemon, cmd: str, needle: str) -> None:
    r = _ttsctl(daemon, "--socket", daemon.socket, cmd)
    assert r.returncode == 0, r.stderr
    assert needle in r.stdout


def test_ttsctl_reports_errors(daemon: Daemon, tmp_path: Path) -> None:
    r = _ttsctl(daemon, "--socket", daemon.socket, "synth", "   ", "-o", str(tmp_path / "x.wav"))
    assert r.returncode == 1 and "empty_text" in r.stderr
    r = _ttsctl(daemon, "--socket", str(tmp_path / "nope.sock"), "ping")
    assert r.returncode == 1 and "cannot connect" in r.stderr


def test_sync_client_typed_errors(daemon: Daemon) -> None:
    with Client(daemon.socket) as c:
        assert c.ping()
        with pytest.raises(TtsdError) as info:
            c.synthesize_all("hello", voice="nobody")
        assert info.value.code == "unknown_voice"
        result = c.synthesize_all("Still fine.", format="f32le")
        assert result.format == "f32le" and result.samples().size > 1000
        assert result.stats["chunks"] == len(result.chunks)


def test_async_client_runs_requests_concurrently(daemon: Daemon) -> None:
    async def run() -> list[int]:
        async with await AsyncClient.connect(daemon.socket) as ac:
            results = await asyncio.gather(
                *(ac.synthesize_all(f"Concurrent request {i}.") for i in range(4))
            )
            assert (await ac.request("ping"))["event"] == "pong"
            return [len(r.audio) for r in results]

    sizes = asyncio.run(run())
    assert all(s > 0 for s in sizes)
