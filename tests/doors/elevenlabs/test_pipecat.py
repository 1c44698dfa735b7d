"""pipecat-ai's ElevenLabsTTSService, unchanged but for its URL, against the real daemon on
loopback (tests/agents_venv.py keeps pipecat out of ttsd's venv)."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from tests.agents_venv import agents_python
from tests.asr import recognize, words
from tests.doors.http.conftest import HttpDaemon

VOICE = "en_US-joe-medium"
RATE = 16000
CLIENT = Path(__file__).with_name("pipecat_client.py")
RESAMPLER_MS = 30.0


def run_pipecat(d: HttpDaemon, scenario: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(wire log, frames out) of one scenario of pipecat_client.py."""
    url = d.base.replace("http://", "ws://")
    proc = subprocess.run(
        [str(agents_python()), str(CLIENT), url, VOICE, scenario],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    wire = [x for x in lines if "dir" in x]
    frames = [x["frame"] for x in lines if "frame" in x]
    assert wire, proc.stderr[-4000:]
    return wire, frames


def pcm(frames: list[dict[str, Any]], context: str | None = None) -> np.ndarray:
    data = b"".join(
        base64.b64decode(f["audio"])
        for f in frames
        if "audio" in f and (context is None or f["context"] == context)
    )
    return np.frombuffer(data, np.int16)


def contexts(wire: list[dict[str, Any]]) -> list[str]:
    seen: list[str] = []
    for x in wire:
        cid = x["msg"].get("context_id") if x["dir"] == "out" else None
        if cid and cid not in seen:
            seen.append(cid)
    return seen


def test_pipecat_speaks_and_its_alignment_lies_inside_the_audio(ws_daemon: HttpDaemon) -> None:
    wire, frames = run_pipecat(ws_daemon, "speak")
    heard = set(words(recognize(pcm(frames), RATE)))
    said = {"hello", "there", "test", "streaming", "speech", "works", "quite", "well"}
    # Five of the eight: the door speaks with the voice's noise on (no client setting turns
    # it off), and pocketsphinx missed three in one run of many ("whoa" for "hello", "bear"
    # for "there"); silence or garbage is heard as none of them.
    assert len(heard & said) >= 5, heard
    [cid] = contexts(wire)
    received = [x["msg"] for x in wire if x["dir"] == "in"]
    assert sum(1 for m in received if m.get("isFinal") is True) == 1
    assert received[-1] == {"isFinal": True, "contextId": cid}
    # Blocks tile the context's audio (Pipecat adds each block's end to its clock): every
    # character starts in order, and within the audio received with it (the resampler
    # to 16 kHz holds back a few ms).
    clock = audio_ms = 0.0
    last = -1.0
    chars = ""
    for m in received:
        audio_ms += m.get("audio", 0) / 2 / RATE * 1000 if isinstance(m.get("audio"), int) else 0
        al = m.get("alignment")
        if not al or not al["chars"]:
            continue
        for c, s in zip(al["chars"], al["charStartTimesMs"], strict=True):
            assert clock + s >= last
            last = clock + s
            assert last <= audio_ms + RESAMPLER_MS, (c, last, audio_ms)
        clock += al["charStartTimesMs"][-1] + al["charDurationsMs"][-1]
        chars += "".join(al["chars"])
    sent = "".join(x["msg"].get("text") or "" for x in wire if x["dir"] == "out")
    assert "this is a test of streaming speech." in sent
    assert chars.strip() == sent.strip()  # every character, as pipecat sent it
    assert clock <= audio_ms + RESAMPLER_MS
    # pipecat turned the alignment into its word frames
    said = [f["word"] for f in frames if "word" in f]
    assert said[:3] == ["Hello", "there,", "this"]


def test_an_interruption_stops_the_old_context_and_the_next_reply_is_spoken(
    ws_daemon: HttpDaemon,
) -> None:
    wire, frames = run_pipecat(ws_daemon, "interrupt")
    first, second = contexts(wire)
    closed = next(
        x["t"]
        for x in wire
        if x["dir"] == "out" and x["msg"] == {"context_id": first, "close_context": True}
    )
    old = [x for x in wire if x["dir"] == "in" and x["msg"].get("contextId") == first]
    before = sum(x["msg"].get("audio") or 0 for x in old if x["t"] <= closed)
    after = sum(x["msg"].get("audio") or 0 for x in old if x["t"] > closed)
    assert before > 0
    # The long first sentence is ~6 s of audio; what still came after the close is what was
    # in flight (a chunk or two), not the rest of it.
    assert after / 2 / RATE < 1.0, (before, after)
    assert sum(1 for x in old if x["msg"].get("isFinal") is True) == 1
    heard = set(words(recognize(pcm(frames, second), RATE)))
    assert len(heard & {"thank", "you", "very", "much", "have", "nice", "day"}) >= 4, heard
