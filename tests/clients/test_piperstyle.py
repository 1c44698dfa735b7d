"""PiperStyle and each_line on event streams made here (the real CLI: test_ctl_piper.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from appliance.clients.piperstyle import PiperStyle, each_line, normalized


def _chunk(samples: list[float], end: bool, at_ms: float, span: tuple[int, int]) -> dict[str, Any]:
    audio = np.asarray(samples, dtype="<f4")
    return {
        "event": "chunk",
        "audio": audio.tobytes(),
        "offset_ms": at_ms,
        "duration_ms": 1000.0 * audio.size / 1000,
        "text_span": list(span),
        "sentence_end": end,
        "words": [{"text_span": list(span), "offset_ms": at_ms, "duration_ms": 1.0}],
    }


def _request() -> list[dict[str, Any]]:
    """Two sentences at 1000 Hz: the first in two chunks (peak 0.5), the second in one."""
    return [
        {"event": "start", "sample_rate": 1000, "format": "f32le"},
        _chunk([0.1, -0.5], False, 0.0, (0, 5)),
        _chunk([0.25], True, 2.0, (6, 9)),
        _chunk([0.2, 0.1], True, 3.0, (10, 14)),
        {"event": "end", "cancelled": False, "stats": {"audio_ms": 5.0}},
    ]


def _audio(events: list[dict[str, Any]]) -> list[float]:
    return [
        float(x)
        for ev in events
        if ev["event"] == "chunk"
        for x in np.frombuffer(ev["audio"], dtype="<f4")
    ]


def test_normalize_is_per_sentence_and_volume_comes_after() -> None:
    out = list(PiperStyle(normalize=True, volume=0.5).shape(_request()))
    assert [ev["event"] for ev in out] == ["start", "chunk", "chunk", "chunk", "end"]
    np.testing.assert_allclose(_audio(out), [0.1, -0.5, 0.25, 0.5, 0.25], rtol=1e-6)
    assert [ev["offset_ms"] for ev in out[1:4]] == [0.0, 2.0, 3.0]  # no silence: no move


def test_nothing_asked_passes_the_events_through() -> None:
    events = _request()
    assert list(PiperStyle().shape(events)) == events


def test_sentence_silence_goes_between_sentences_and_moves_later_times() -> None:
    out = list(PiperStyle(silence_s=0.003).shape(_request()))
    assert _audio(out) == _audio(_request())[:3] + [0.0] * 3 + _audio(_request())[3:]
    silence, last = out[3], out[4]
    assert silence["text_span"] == [10, 10] and silence["duration_ms"] == 3.0
    assert last["offset_ms"] == 6.0 and last["words"][0]["offset_ms"] == 6.0
    assert out[-1]["event"] == "end"  # none after the last sentence


def test_a_silent_sentence_stays_silent() -> None:
    """piper-tts writes zeros for a peak under 1e-8, rather than dividing by it."""
    assert normalized(np.zeros(4, np.float32)).tolist() == [0.0] * 4


def test_each_line_is_one_request_placed_in_the_whole() -> None:
    text = "  One.\n\nTwo, three.\n"
    asked: list[str] = []

    def synth(line: str) -> Iterator[dict[str, Any]]:
        asked.append(line)
        yield {"event": "start", "sample_rate": 1000}
        yield _chunk([0.1] * 4, True, 0.0, (0, len(line)))
        yield {"event": "end", "cancelled": False, "stats": {"audio_ms": 4.0, "ttfp_ms": 9}}

    out = list(each_line(text, synth))
    assert asked == ["One.", "Two, three."]
    assert [ev["event"] for ev in out] == ["start", "chunk", "chunk", "end"]
    first, second = out[1], out[2]
    assert text[slice(*first["text_span"])] == "One."
    assert text[slice(*second["text_span"])] == "Two, three."
    assert second["offset_ms"] == 4.0 and second["words"][0]["offset_ms"] == 4.0
    assert out[-1]["stats"] == {"audio_ms": 8.0, "ttfp_ms": 9}
