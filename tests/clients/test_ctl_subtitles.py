"""``ttsctl synth --subtitles``: WebVTT or SRT beside the audio, cues from word timings."""

from __future__ import annotations

import re
import wave
from pathlib import Path

import numpy as np
import numpy.typing as npt

from tests.clients.test_client_cli import _ttsctl
from tests.conftest import Daemon

TEXT = "Good morning, Dr. Smith. Your train leaves at 3:45 p.m. from platform two."
CUE = re.compile(r"(\d\d):(\d\d):(\d\d)([.,])(\d\d\d) --> (\d\d):(\d\d):(\d\d)[.,](\d\d\d)")


def end_s(m: re.Match[str]) -> float:
    return int(m[6]) * 3600 + int(m[7]) * 60 + int(m[8]) + int(m[9]) / 1000


def test_vtt_a_cue_per_sentence_within_the_audio(daemon: Daemon, tmp_path: Path) -> None:
    wav, vtt = tmp_path / "out.wav", tmp_path / "out.vtt"
    r = _ttsctl(
        daemon, "--socket", daemon.socket, "synth", TEXT, "-o", str(wav), "--subtitles", str(vtt)
    )
    assert r.returncode == 0, r.stderr
    assert "2 cues" in r.stderr and r.stdout == ""
    text = vtt.read_text("utf-8")
    assert text.startswith("WEBVTT\n\n")
    lines = text.split("\n")
    cues = [
        (CUE.fullmatch(lines[k]), lines[k + 1])
        for k in range(len(lines))
        if CUE.fullmatch(lines[k])
    ]
    assert [t for _, t in cues] == [
        "Good morning, Dr. Smith.",
        "Your train leaves at 3:45 p.m. from platform two.",
    ]
    with wave.open(str(wav)) as w:
        rate = w.getframerate()
        samples = np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float64)
    last = cues[-1][0]
    assert last is not None and end_s(last) <= len(samples) / rate
    # The last cue ends with the speech: what follows is the sentence's final pause, as
    # long as the voice's noise makes it (100–900 ms measured), and silent.
    speech, after = np.split(samples, [round(end_s(last) * rate)])
    assert _rms(after) < 0.05 * _rms(speech)


def _rms(x: npt.NDArray[np.float64]) -> float:
    return float(np.sqrt(np.mean(x**2))) if len(x) else 0.0


def test_srt_with_at_most_n_words_a_cue(daemon: Daemon, tmp_path: Path) -> None:
    wav, srt = tmp_path / "out.wav", tmp_path / "out.srt"
    args = ["synth", TEXT, "-o", str(wav), "--subtitles", str(srt), "--cue-words", "3"]
    r = _ttsctl(daemon, "--socket", daemon.socket, *args)
    assert r.returncode == 0, r.stderr
    blocks = srt.read_text("utf-8").strip().split("\n\n")
    texts = [b.split("\n")[2] for b in blocks]
    assert [b.split("\n")[0] for b in blocks] == [str(k) for k in range(1, len(blocks) + 1)]
    assert texts[:2] == ["Good morning, Dr.", "Smith."]  # a sentence's end closes a cue too
    assert " ".join(texts) == TEXT
    assert all(len(t.split()) <= 4 for t in texts)  # "3:45 p.m." is one written word
    assert all(CUE.fullmatch(b.split("\n")[1]) and "," in b.split("\n")[1] for b in blocks)


def test_bad_subtitles_are_refused_before_synthesis(daemon: Daemon, tmp_path: Path) -> None:
    wav = tmp_path / "out.wav"
    r = _ttsctl(
        daemon,
        "--socket",
        daemon.socket,
        "synth",
        TEXT,
        "-o",
        str(wav),
        "--subtitles",
        str(tmp_path / "x.txt"),
    )
    assert r.returncode == 2 and "vtt or .srt" in r.stderr
    assert not wav.exists()


def test_markdown_subtitles_read_a_reference_once(daemon: Daemon, tmp_path: Path) -> None:
    """``--markdown --subtitles``: a cue shows the ampersand a ``&amp;`` stands for, escaped
    once for WebVTT (the CLI built its cues as plain text: "&amp;amp;")."""
    wav, vtt = tmp_path / "out.wav", tmp_path / "out.vtt"
    args = ["synth", "Salt &amp; pepper, please.", "--markdown", "-o", str(wav)]
    r = _ttsctl(daemon, "--socket", daemon.socket, *args, "--subtitles", str(vtt))
    assert r.returncode == 0, r.stderr
    assert vtt.read_text("utf-8").split("\n")[3] == "Salt &amp; pepper, please."
