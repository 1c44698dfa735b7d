"""Speed up to 4× on the daemon as built for serving: past the voice's own limit (2×) a
libsonic time-stretch makes up the rest, chunk by chunk, without clicks at the joins."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from appliance.clients.client import Client
from appliance.model.stretch import VOICE_SPEED_LIMIT, Stretcher
from tests.asr import recognize, word_errors
from tests.conftest import Daemon

TEXT = "Please turn on the kitchen lights. The next train leaves from platform two."
ZERO = {"noise_scale": 0.0, "noise_w": 0.0}


def pcm(daemon: Daemon, **opts: Any) -> tuple[np.ndarray, list[dict[str, Any]]]:
    with Client(daemon.socket) as c:
        evs = list(c.synthesize(TEXT, format="s16le", **ZERO, **opts))
    chunks = [e for e in evs if e["event"] == "chunk"]
    audio = np.frombuffer(b"".join(e["audio"] for e in chunks), "<i2")
    return audio, chunks


@pytest.mark.parametrize("speed", [3.0, 4.0])
def test_fast_speech_is_as_short_as_asked_and_still_words(daemon: Daemon, speed: float) -> None:
    base, _ = pcm(daemon)
    fast, chunks = pcm(daemon, speed=speed)
    ratio = len(fast) / len(base)
    assert abs(ratio * speed - 1.0) < 0.05, ratio
    # Offsets and durations follow the stretched audio.
    total_ms = sum(c["duration_ms"] for c in chunks)
    assert abs(total_ms - len(fast) / 22.05) < 1.0
    # pocketsphinx, trained on speech at a normal rate, hears almost nothing at 3× (nor of
    # espeak-ng at 3×): the words are checked slowed back to 1× (libsonic again), which
    # keeps only what the fast audio carries.
    back = Stretcher(22050, 1.0 / speed)
    slowed = np.concatenate([back.process(fast.astype(np.float32) / 32768), back.flush()])
    heard = recognize((slowed * 32767).astype(np.int16), 22050)
    errors, n = word_errors(TEXT, heard)
    assert errors <= n // 2, heard


@pytest.mark.parametrize("speed", [0.5, 0.8, 1.25, 1.5, 2.0])
def test_speed_makes_speech_exactly_that_much_shorter(daemon: Daemon, speed: float) -> None:
    """The voice re-timed (appliance.model.retime), stretched past 1.25×: the length is
    1/speed of speed 1's to a frame per clause (the length scale alone gave 0.62 at 2×)."""
    base, _ = pcm(daemon)
    got, _ = pcm(daemon, speed=speed)
    clauses, frame = 2, 256
    assert abs(len(got) - len(base) / speed) <= clauses * frame + 0.004 * len(base), (
        len(got) * speed / len(base)
    )


def test_up_to_the_voice_limit_nothing_is_stretched(daemon: Daemon) -> None:
    """Up to the voice's limit its own timing does it all: no time-stretch, so with zero
    noise the same audio every time, and exactly what the graph gives at some length scale
    (tests/model/test_retime.py)."""
    a, _ = pcm(daemon, speed=VOICE_SPEED_LIMIT)
    b, _ = pcm(daemon, speed=VOICE_SPEED_LIMIT)
    assert a.tobytes() == b.tobytes()


def test_stretcher_joins_are_seamless() -> None:
    """Chunk by chunk is the same as all at once: the joins add nothing."""
    t = np.arange(22050 * 2) / 22050
    x = (0.3 * np.sin(2 * np.pi * 140 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))).astype(
        np.float32
    )
    whole = Stretcher(22050, 1.5)
    ref = np.concatenate([whole.process(x), whole.flush()])
    parts = Stretcher(22050, 1.5)
    got = np.concatenate([parts.process(x[i : i + 1234]) for i in range(0, len(x), 1234)])
    got = np.concatenate([got, parts.flush()])
    assert abs(len(got) - len(x) / 1.5) < 0.02 * len(x)
    n = min(len(got), len(ref))
    assert float(np.max(np.abs(got[:n] - ref[:n]))) < 1e-3
    assert float(np.max(np.abs(np.diff(got)))) < 0.1  # no step at any join


def test_stretcher_says_what_it_holds_back() -> None:
    """libsonic keeps a few pitch periods across chunks: ``held`` is what it owes for the
    input so far, so the next input's place in the output is what was read plus that."""
    t = np.arange(22050) / 22050
    x = (0.3 * np.sin(2 * np.pi * 140 * t)).astype(np.float32)
    s = Stretcher(22050, 1.5)
    read = 0
    for factor, part in ((1.5, x[:7000]), (2.5, x[7000:15000]), (2.0, x[15000:])):
        s.set_factor(factor)
        read += len(s.process(part))
    due = 7000 / 1.5 + 8000 / 2.5 + (len(x) - 15000) / 2.0
    assert s.held > 100  # it does hold some back (~20 ms)
    assert abs(read + s.held - due) < 0.01 * due
    rest = s.flush()
    assert s.held == 0.0
    assert abs(read + len(rest) - due) < 0.01 * due


def test_speed_bounds(daemon: Daemon) -> None:
    with Client(daemon.socket) as c:
        for bad in (4.5, 0.4):
            with pytest.raises(Exception, match="speed"):
                c.synthesize_all("Hi.", speed=bad)


def test_marks_follow_the_stretch(daemon: Daemon) -> None:
    text = (
        "<speak>The quick brown fox jumps over the lazy dog <mark name='m'/> and runs "
        "far away into the dark green forest.</speak>"
    )
    with Client(daemon.socket) as c:
        evs = list(c.synthesize(text, text_format="ssml", speed=4.0, **ZERO))
    chunks = [e for e in evs if e["event"] == "chunk"]
    total = sum(e["duration_ms"] for e in chunks)
    marks = [m["offset_ms"] for e in chunks for m in e.get("marks", [])]
    assert len(marks) == 1 and 0.3 * total < marks[0] < 0.7 * total, (marks, total)


def test_word_timings_follow_the_stretch(daemon: Daemon) -> None:
    """At 4× the words are timed in the stretched audio: the last word ends within the
    audio, and the words keep their order and their share of it."""
    with Client(daemon.socket) as c:
        evs = list(c.synthesize(TEXT, speed=4.0, word_timings=True, **ZERO))
    chunks = [e for e in evs if e["event"] == "chunk"]
    total = sum(e["duration_ms"] for e in chunks)
    words = [w for e in chunks for w in e.get("words", [])]
    assert len(words) == len(TEXT.split())
    offsets = [w["offset_ms"] for w in words]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    last = words[-1]
    # Unstretched, the timings would run to about twice the audio's length.
    assert 0.6 * total < last["offset_ms"] + last["duration_ms"] <= total + 12.0, (last, total)


def test_a_break_lasts_as_long_at_any_speed(daemon: Daemon) -> None:
    """SSML's ``<break time>`` is a time, not speech: at 3× (time-stretched) it still lasts
    800 ms, and the words after it are timed after all of it (the stretch once shortened
    the break to ~330 ms while the words still counted 800)."""
    said = "Open the door and close the window now."
    broken = '<speak>Open the door <break time="800ms"/> and close the window now.</speak>'
    with Client(daemon.socket) as c:
        plain = c.synthesize_all(said, speed=3.0, word_timings=True, **ZERO)
        with_break = c.synthesize_all(
            broken, text_format="ssml", speed=3.0, word_timings=True, **ZERO
        )
    added_ms = (len(with_break.audio) - len(plain.audio)) / 2 / 22.05
    assert abs(added_ms - 800) < 30, added_ms
    a = [w["offset_ms"] for ch in plain.chunks for w in ch.get("words", [])]
    b = [w["offset_ms"] for ch in with_break.chunks for w in ch.get("words", [])]
    assert len(a) == len(b) == len(said.split())
    assert all(abs(y - x) < 20 for x, y in zip(a[:3], b[:3], strict=True)), (a, b)
    assert all(abs(y - x - 800) < 30 for x, y in zip(a[3:], b[3:], strict=True)), (a, b)
    total_ms = sum(ch["duration_ms"] for ch in with_break.chunks)
    last = [w for ch in with_break.chunks for w in ch.get("words", [])][-1]
    assert last["offset_ms"] + last["duration_ms"] <= total_ms + 12.0
