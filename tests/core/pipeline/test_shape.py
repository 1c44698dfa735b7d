"""The shaping stage as functions: samples in, samples out (no model, no daemon)."""

from __future__ import annotations

import numpy as np
import pytest

from appliance.core.pipeline.shape import (
    Output,
    Shaped,
    crossfade,
    fade,
    joined,
    shape,
    silence_samples,
)
from appliance.core.pipeline.types import EncodedClause, Voiced
from appliance.text.frontend import Clause

RATE, HOP = 22050, 256


def clause(**extra: object) -> Clause:
    return Clause("one two three", (0, 13), True, ((0, 3), (4, 7), (8, 13)), **extra)  # type: ignore[arg-type]


def voiced(c: Clause, total: int = 10, pauses: dict[int, int] | None = None) -> Voiced:
    audio = np.ones(total * HOP, np.float32)
    enc = EncodedClause(np.zeros(5, np.int64), None, audio)
    return Voiced(c, enc, [(0, total)], total, 0.0, pauses or {})


def test_fades_ramp_in_and_out_and_leave_the_rest() -> None:
    audio = np.ones(100, np.float32)
    out = fade(audio, 10, 20)
    assert out[0] == 0.0 and out[10:80].tolist() == [1.0] * 70
    assert np.all(np.diff(out[:10]) > 0) and np.all(np.diff(out[80:]) < 0)
    assert fade(audio, 0, 0) is audio and audio.tolist() == [1.0] * 100  # not in place


def test_a_join_crossfades_the_provisional_tail_into_the_next_frame() -> None:
    lead = np.full(50, 2.0, np.float32)
    audio = np.concatenate([np.zeros(HOP, np.float32), np.ones(300, np.float32)])
    out = joined(lead, audio, HOP)
    assert len(out) == 50 + 300  # the frame before the join: only its last len(lead) samples
    np.testing.assert_allclose(out[:50], crossfade(lead, np.zeros(50, np.float32)))
    assert out[0] == 2.0 and out[49] < 0.1 and out[50:].tolist() == [1.0] * 300


def test_shape_adds_the_silence_asked_around_a_chunk_and_its_gain() -> None:
    c = clause(pause_before_ms=100, pause_after_ms=50, volume=0.5)
    v = voiced(c, total=10, pauses={4: 200})
    audio = np.ones(4 * HOP, np.float32)
    first = shape(v, audio, (0, 4), first=True, join_in=False, fade_out=False, fade_n=8,
                  volume=0.5, rate=RATE)  # fmt: skip
    assert first.before == silence_samples(100, RATE)
    assert first.after == silence_samples(200, RATE)  # the break after frame 4
    assert first.speech[0] == pytest.approx(0.25) and first.speech[-1] < 0.25  # faded out
    last = shape(v, audio, (4, 10), first=False, join_in=False, fade_out=False, fade_n=8,
                 volume=1.0, rate=RATE)  # fmt: skip
    assert last.before == 0 and last.after == silence_samples(50, RATE)
    assert last.speech[0] < 0.5  # faded in after the break


def test_output_without_a_stretch_is_the_silence_and_speech_as_shaped() -> None:
    out = Output(RATE, None)
    speech = np.linspace(-1, 1, 500, dtype=np.float32)
    got = out.render(Shaped(speech, 30, 20), final=False)
    assert not out.stretching and out.factor == 1.0 and out.held_s == 0.0
    assert got[:30].tolist() == [0.0] * 30 and got[-20:].tolist() == [0.0] * 20
    np.testing.assert_array_equal(got[30:-20], speech)


def test_a_stretch_shortens_the_speech_but_not_the_silence() -> None:
    out = Output(RATE, 2.5)  # 2× past the voice's limit of 1.25
    assert out.stretching and out.factor == pytest.approx(2.0)
    t = np.arange(RATE, dtype=np.float32) / RATE
    speech = (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    first = out.render(Shaped(speech[: RATE // 2]), final=False)
    assert out.held_s > 0  # libsonic holds some back: the timeline counts it
    rest = out.render(Shaped(speech[RATE // 2 :], after=1000), final=True)
    assert not out.stretching  # closed with the final chunk
    assert rest[-1000:].tolist() == [0.0] * 1000
    assert len(first) + len(rest) - 1000 == pytest.approx(RATE / 2, rel=0.02)
