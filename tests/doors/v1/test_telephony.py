"""G.711 and paced output over protocol v1, on the daemon as ``Runtime.load`` builds it.

The G.711 bytes are decoded by the standard library's ``audioop`` (deprecated, present in
Python 3.11): an independent implementation of the same ITU-T tables, not ours.
"""

from __future__ import annotations

import time
import warnings
from typing import Any

import numpy as np
import pytest

from appliance.doors.pcm import lin2alaw, lin2ulaw
from tests.asr import recognize, word_errors
from tests.conftest import Daemon
from tests.wire import Wire

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop

SENTENCE = "Please hold while we connect your call to the next available agent."


def _synth(daemon: Daemon, rid: int, **fields: Any) -> tuple[dict[str, Any], list[Any], float]:
    """start, the chunk events with their arrival times, and the end's stats."""
    with Wire(daemon.socket) as w:
        w.send({"op": "synthesize", "id": rid, "text": SENTENCE, **fields})
        start = w.recv()
        assert start is not None and start["event"] == "start", start
        chunks: list[tuple[float, dict[str, Any]]] = []
        while True:
            ev = w.recv()
            assert ev is not None and ev["event"] in ("chunk", "end"), ev
            if ev["event"] == "end":
                return start, chunks, ev["stats"]
            chunks.append((time.monotonic(), ev))


def _decode(fmt: str, data: bytes) -> np.ndarray:
    lin = audioop.ulaw2lin(data, 2) if fmt == "mulaw" else audioop.alaw2lin(data, 2)
    return np.frombuffer(lin, dtype=np.int16)


@pytest.mark.parametrize("fmt", ["mulaw", "alaw"])
def test_g711_round_trip(daemon: Daemon, fmt: str) -> None:
    start, chunks, _ = _synth(daemon, 1, format=fmt)
    assert start["sample_rate"] == 8000 and start["format"] == fmt
    data = b"".join(ev["audio"] for _, ev in chunks)
    pcm = _decode(fmt, data)
    # One byte a sample at 8 kHz: the decoded length is the audio's.
    assert abs(len(pcm) / 8000 - sum(ev["duration_ms"] for _, ev in chunks) / 1000) < 0.05
    # The same 8 kHz audio as s16le, through G.711's 8-bit companding: ~38 dB SNR for speech.
    _, ref_chunks, _ = _synth(
        daemon, 2, format="s16le", sample_rate=8000, noise_scale=0.0, noise_w=0.0
    )
    _, g_chunks, _ = _synth(daemon, 3, format=fmt, noise_scale=0.0, noise_w=0.0)
    ref = np.frombuffer(b"".join(ev["audio"] for _, ev in ref_chunks), dtype="<i2")
    got = _decode(fmt, b"".join(ev["audio"] for _, ev in g_chunks))
    assert len(ref) == len(got)
    err = ref.astype(np.float64) - got
    snr = 10 * np.log10(np.sum(ref.astype(np.float64) ** 2) / max(np.sum(err**2), 1e-9))
    assert snr > 25, snr
    errors, n = word_errors(SENTENCE, recognize(pcm, 8000))
    assert errors <= n // 3, (errors, n)


def test_g711_follows_sample_rate(daemon: Daemon) -> None:
    start, chunks, _ = _synth(daemon, 1, format="mulaw", sample_rate=16000)
    assert start["sample_rate"] == 16000
    data = b"".join(ev["audio"] for _, ev in chunks)
    assert abs(len(data) / 16000 - sum(ev["duration_ms"] for _, ev in chunks) / 1000) < 0.05


def test_our_encoder_is_the_standard() -> None:
    """Every 16-bit value encodes as the standard library's G.711 does."""
    x = np.arange(-32768, 32768, dtype=np.int16)
    assert lin2ulaw(x) == audioop.lin2ulaw(x.tobytes(), 2)
    assert lin2alaw(x) == audioop.lin2alaw(x.tobytes(), 2)


def test_paced_frames(daemon: Daemon) -> None:
    """20 ms frames of exactly 160 bytes, on the clock after the start buffer."""
    sent = time.monotonic()
    _, chunks, stats = _synth(daemon, 1, format="mulaw", pace_ms=20)
    sizes = {len(ev["audio"]) for _, ev in chunks}
    assert sizes == {160}, sizes
    assert [ev["seq"] for _, ev in chunks] == list(range(len(chunks)))
    assert all(ev["duration_ms"] == 20.0 for _, ev in chunks)
    assert [ev["offset_ms"] for _, ev in chunks] == [20.0 * k for k in range(len(chunks))]
    assert stats["paced_frames"] == len(chunks)
    audio_s = len(chunks) * 0.02
    assert audio_s > 2.0
    # Real time: the last frame leaves ~audio - start buffer (40 ms) after the first;
    # generous bounds (the figure itself is the bench's).
    span = chunks[-1][0] - chunks[0][0]
    assert audio_s - 0.04 - 0.25 < span < audio_s + 1.5, (span, audio_s)
    times = np.array([t for t, _ in chunks[2:]])
    expected = times[0] + 0.02 * np.arange(len(times))
    late = times - expected
    assert np.median(np.abs(late - np.median(late))) < 0.02
    assert chunks[0][0] - sent < 2.0
    # The span of the text and the sentence end ride on the frames.
    assert chunks[-1][1]["sentence_end"] is True
    assert chunks[-1][1]["text_span"][1] == len(SENTENCE)


def test_paced_any_rate(daemon: Daemon) -> None:
    """At the voice's rate (22 050 Hz), 10 ms is 220.5 samples: frames alternate 220 and
    221 samples and stay exact on average; ``offset_ms`` is seq · N all the same, as
    documented (it said 9.977, 29.977 … : the first sample's time)."""
    _, chunks, _ = _synth(daemon, 1, pace_ms=10, realtime=False)
    sizes = [len(ev["audio"]) // 2 for _, ev in chunks]
    assert set(sizes) <= {220, 221}
    assert abs(sum(sizes) - 220.5 * len(sizes)) <= 1
    assert [ev["offset_ms"] for _, ev in chunks] == [10.0 * ev["seq"] for _, ev in chunks]
    assert {ev["duration_ms"] for _, ev in chunks} == {10.0}


@pytest.mark.parametrize(("fmt", "pace_ms"), [("mulaw", 20), ("s16le", 10)])
def test_paced_frames_carry_every_word_on_the_frame_of_its_start(
    daemon: Daemon, fmt: str, pace_ms: int
) -> None:
    """Issue 42 item 14: paced frames carried no ``words`` (0 of 12).  Every word of the
    unpaced request comes once, on the frame whose [offset_ms, offset_ms + N) holds its
    start, with the same span and times."""
    # Not real-time (admitted on a loaded box too), no quick start: the same words twice.
    zero = {"deterministic": True, "realtime": False, "word_timings": True, "format": fmt}
    _, plain, _ = _synth(daemon, 1, **zero)
    want = [w for _, ev in plain for w in ev["words"]]
    assert len(want) == 12, want
    _, frames, _ = _synth(daemon, 2, pace_ms=pace_ms, **zero)
    assert all("words" in ev for _, ev in frames)  # every frame has the list, as chunks do
    got = [(ev["seq"], w) for _, ev in frames for w in ev["words"]]
    assert [w for _, w in got] == want
    for seq, w in got:
        assert seq * pace_ms <= w["offset_ms"] + 1e-3 < (seq + 1) * pace_ms + 2e-3, (seq, w)


def test_paced_cancel(daemon: Daemon) -> None:
    with Wire(daemon.socket) as w:
        w.send({"op": "synthesize", "id": 1, "text": SENTENCE, "format": "alaw", "pace_ms": 20})
        assert w.recv()["event"] == "start"  # type: ignore[index]
        assert w.recv()["event"] == "chunk"  # type: ignore[index]
        w.send({"op": "cancel", "id": 2, "target": 1})
        events = w.until(1)
        assert events[-1]["event"] == "end" and events[-1]["cancelled"] is True
        assert len(events) < 100  # far fewer than the ~4 s of frames


@pytest.mark.parametrize(
    "fields",
    [{"pace_ms": 0}, {"pace_ms": 5000}, {"pace_ms": "20"}, {"format": "ulaw"}],
)
def test_bad_fields(daemon: Daemon, fields: dict[str, Any]) -> None:
    with Wire(daemon.socket) as w:
        ev = w.call({"op": "synthesize", "id": 1, "text": "hi", **fields})
        assert ev["event"] == "error" and ev["code"] == "bad_request", ev
        ev = w.call({"op": "speak", "id": 2, "text": "hi", "pace_ms": 20})
        assert ev["event"] == "error" and ev["code"] == "bad_request", ev
