"""The recording check itself: what a sound server may do passes, what a player bug does fails.

``piecewise_match`` is what the sink tests trust to tell an underrun (silence inserted,
a little lost) from damaged speech, so it is held to both here on made-up recordings.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest
import soxr

from tests.playback.audio import Match, piecewise_match

RATE = 48000
Audio = npt.NDArray[np.float32]


@pytest.fixture(scope="module")
def reference(speech: tuple[Audio, int]) -> Audio:
    audio, rate = speech
    return soxr.resample(audio, rate, RATE).astype(np.float32)


def _recorded(*parts: npt.NDArray[np.floating]) -> Audio:
    """As the sink's monitor would give it: a lead-in, the parts, a tail, a noise floor."""
    x = np.concatenate([np.zeros(1234), *parts, np.zeros(RATE // 10)])
    return (x + np.random.default_rng(0).normal(0.0, 1e-4, len(x))).astype(np.float32)


def _passes(match: Match) -> bool:
    """What the sink tests assert."""
    ok_gaps = len(match.scores) >= 10 and match.gaps <= len(match.scores) // 5
    return ok_gaps and min(match.scores) >= 0.9 and match.fidelity >= 0.9


def _loudest(reference: Audio, width: int) -> int:
    energy = np.convolve(reference.astype(np.float64) ** 2, np.ones(width), "valid")
    return int(np.argmax(energy))


def test_a_clean_recording_is_one_piece(reference: Audio) -> None:
    match = piecewise_match(_recorded(reference), reference, RATE)
    assert _passes(match) and match.gaps == 0, match
    assert min(match.scores) > 0.99 and match.fidelity > 0.99


# Where (seconds into the speech) and how much silence an underrun inserts: at the very
# start, inside a window, on a window's edge; from a few ms to far beyond the search slack.
@pytest.mark.parametrize("at_s", [0.01, 0.537, 1.2, 2.05])
@pytest.mark.parametrize("gap_ms", [4, 75, 420])
def test_inserted_silence_is_one_gap(reference: Audio, at_s: float, gap_ms: int) -> None:
    cut = int(at_s * RATE)
    recording = _recorded(reference[:cut], np.zeros(gap_ms * RATE // 1000), reference[cut:])
    match = piecewise_match(recording, reference, RATE)
    assert _passes(match) and match.gaps <= 1, match


@pytest.mark.parametrize("at_s", [0.537, 1.2, 2.05])
def test_a_little_lost_is_one_gap(reference: Audio, at_s: float) -> None:
    cut = int(at_s * RATE)
    recording = _recorded(reference[:cut], reference[cut + 25 * RATE // 1000 :])
    match = piecewise_match(recording, reference, RATE)
    assert _passes(match) and match.gaps == 1, match


def test_two_underruns_are_two_gaps(reference: Audio) -> None:
    a, b = int(0.7 * RATE), int(1.9 * RATE)
    silence = np.zeros(RATE // 8)
    recording = _recorded(reference[:a], silence, reference[a:b], silence, reference[b:])
    match = piecewise_match(recording, reference, RATE)
    assert _passes(match) and match.gaps == 2, match


def test_swapped_stretches_fail(reference: Audio) -> None:
    n = RATE // 5
    at = _loudest(reference, 2 * n)
    swapped = [reference[:at], reference[at + n : at + 2 * n], reference[at : at + n]]
    match = piecewise_match(_recorded(*swapped, reference[at + 2 * n :]), reference, RATE)
    assert not _passes(match), match


def test_speech_replaced_by_noise_fails(reference: Audio) -> None:
    n = RATE // 10
    at = _loudest(reference, n)
    noise = np.random.default_rng(1).normal(0.0, 0.1, n)
    match = piecewise_match(_recorded(reference[:at], noise, reference[at + n :]), reference, RATE)
    assert not _passes(match), match


def test_speech_lost_for_longer_than_an_underrun_loses_fails(reference: Audio) -> None:
    n = RATE // 5
    at = _loudest(reference, n)
    match = piecewise_match(_recorded(reference[:at], reference[at + n :]), reference, RATE)
    assert not _passes(match), match


def test_speech_at_the_wrong_rate_fails(reference: Audio) -> None:
    wrong = soxr.resample(reference, RATE, int(RATE * 1.02)).astype(np.float32)
    match = piecewise_match(_recorded(wrong), reference, RATE)
    assert not _passes(match), match
