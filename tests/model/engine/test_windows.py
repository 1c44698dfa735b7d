"""Windowed decoding: exact against the fused model, and decoded ahead in large windows."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

import numpy as np

from appliance.model.engine.base import Scales
from appliance.model.engine.onnx import OnnxVoiceModel
from appliance.model.engine.windows import (
    AHEAD_MAX_FRAMES,
    MAX_FLOW_FRAMES,
    MAX_WINDOW_FRAMES,
    SPLIT_MIN_FLOW_FRAMES,
    decode_span,
    decode_windows,
    flow_all,
)
from appliance.model.voices import CUT_TOLERANCE
from appliance.speech import FloatArray, IntArray
from tests.fakes.voice import RecordingModel, flow_voice, real_voice

HOP = 256
ZERO = Scales(0.0, 1.0, 0.0)
TEXT = (
    "The committee met on a cold and windy morning to review the proposal for the new "
    "library building, which would replace the old structure in the town square."
)


@functools.lru_cache(maxsize=1)
def model_and_ids() -> tuple[OnnxVoiceModel, IntArray]:
    from appliance.text.phonemize import Phonemizer

    voice, model = flow_voice()
    return model, Phonemizer(voice.info).ids(TEXT)


@functools.lru_cache(maxsize=1)
def long_ids() -> IntArray:
    """The text twice: a clause longer than a decoder window and than a flow split."""
    from appliance.text.phonemize import Phonemizer

    voice, _ = real_voice()
    return Phonemizer(voice.info).ids(TEXT + " " + TEXT)


def chunks_of(total: int, sizes: list[int]) -> list[tuple[int, int]]:
    out, a = [], 0
    for n in sizes:
        if a >= total:
            break
        out.append((a, min(total, a + n)))
        a += n
    if a < total:
        out.append((a, total))
    return out


def test_streamed_chunks_equal_the_fused_model() -> None:
    model, ids = model_and_ids()
    fused = model.fused(ids, ZERO, None)
    enc = model.encode_prior(ids, ZERO, None)
    # A dialog stream's chunk sizes: small first, growing, then capped.
    spans = chunks_of(enc.frames, [8, 18, 37, 69, 69, 69, 69, 69])
    out = np.concatenate([decode_span(model, enc, a, b, 16, HOP) for a, b in spans])
    assert out.shape == fused.shape
    assert float(np.max(np.abs(out - fused))) <= CUT_TOLERANCE


def test_a_span_out_of_order_is_decoded_afresh_and_still_exact() -> None:
    model, ids = model_and_ids()
    enc = model.encode(ids, ZERO, None)
    reference = decode_windows(model, model.encode(ids, ZERO, None), 32, 16, HOP)
    decode_span(model, enc, 0, 8, 16, HOP)
    decode_span(model, enc, 8, 30, 16, HOP)  # decodes ahead of 30
    again = decode_span(model, enc, 100, 140, 16, HOP)  # not where the stream was
    np.testing.assert_allclose(again, reference[100 * HOP : 140 * HOP], atol=CUT_TOLERANCE)
    back = decode_span(model, enc, 10, 20, 16, HOP)
    np.testing.assert_allclose(back, reference[10 * HOP : 20 * HOP], atol=CUT_TOLERANCE)


def test_the_first_chunk_decodes_nothing_ahead() -> None:
    model, ids = model_and_ids()
    counting = RecordingModel(model)
    enc = counting.encode_prior(ids, ZERO, None)
    decode_span(counting, enc, 0, 8, 16, HOP)
    assert counting.decoded == [8 + 16]
    assert enc.ahead is None


def test_a_later_clauses_first_chunk_decodes_ahead_and_stays_exact() -> None:
    """A later clause's listener has the clauses before it in hand: its first chunk
    decodes 4x its frames (what a chunk that far into a clause would), and the next
    chunk comes from that audio."""
    model, ids = model_and_ids()
    fused = model.fused(ids, ZERO, None)
    counting = RecordingModel(model)
    enc = counting.encode_prior(ids, ZERO, None)
    first = decode_span(counting, enc, 0, 20, 16, HOP, later=True)
    assert counting.decoded == [4 * 20 + 16] and enc.ahead is not None
    second = decode_span(counting, enc, 20, 60, 16, HOP, later=True)
    assert len(counting.decoded) == 1  # served from what the first decoded ahead
    got = np.concatenate([first, second])
    assert float(np.max(np.abs(got - fused[: len(got)]))) <= CUT_TOLERANCE


def test_a_long_clause_is_decoded_in_windows_larger_than_its_chunks() -> None:
    model, ids = model_and_ids()
    counting = RecordingModel(model)
    enc = counting.encode(ids, ZERO, None)
    spans = chunks_of(enc.frames, [8, 18, 37] + [69] * 20)
    for a, b in spans:
        decode_span(counting, enc, a, b, 16, HOP)
    # Chunk by chunk, each 69-frame chunk would cost 69 + 32 frames (1.46x); decoded
    # ahead in windows of up to AHEAD_MAX_FRAMES the whole clause costs far less.
    assert len(counting.decoded) < len(spans)
    assert max(counting.decoded) <= AHEAD_MAX_FRAMES + 2 * 16
    assert sum(counting.decoded) <= 1.35 * enc.frames


def test_a_whole_long_clause_is_decoded_in_bounded_runs_and_still_exact() -> None:
    """A sentence-mode chunk is the whole clause; longer than MAX_WINDOW_FRAMES it is
    decoded run after run (the arenas then keep a bounded run's buffers, not a whole
    sentence's), each run with its context, and the samples are the same."""
    model, _ = model_and_ids()
    ids = long_ids()
    fused = model.fused(ids, ZERO, None)
    counting = RecordingModel(model)
    enc = counting.encode_prior(ids, ZERO, None)
    assert enc.frames > MAX_WINDOW_FRAMES + 16
    out = decode_span(counting, enc, 0, enc.frames, 16, HOP)
    assert len(counting.decoded) == -(-enc.frames // MAX_WINDOW_FRAMES)
    assert max(counting.decoded) <= MAX_WINDOW_FRAMES + 2 * 16
    assert out.shape == fused.shape
    assert float(np.max(np.abs(out - fused))) <= CUT_TOLERANCE


def test_with_the_cores_wanted_elsewhere_a_chunk_costs_only_its_own_frames() -> None:
    """``ahead=False`` (other work waits): every chunk is its own decode, no larger than
    its frames and context, the flow runs only a little past what is asked, and the
    samples are still the fused model's."""
    model, ids = model_and_ids()
    fused = model.fused(ids, ZERO, None)
    counting = RecordingModel(model)
    enc = counting.encode_prior(ids, ZERO, None)
    spans = chunks_of(enc.frames, [8, 18, 37] + [69] * 20)
    out = []
    for k, (a, b) in enumerate(spans):
        out.append(decode_span(counting, enc, a, b, 16, HOP, ahead=False))
        if k == 1:  # the flow went no further than the next chunk needs (and its minimum)
            assert enc.ready <= b + 16 + 2 * model.flow_context < enc.frames
    assert len(counting.decoded) == len(spans)
    assert all(n <= (b - a) + 2 * 16 for n, (a, b) in zip(counting.decoded, spans, strict=True))
    audio = np.concatenate(out)
    assert audio.shape == fused.shape
    assert float(np.max(np.abs(audio - fused))) <= CUT_TOLERANCE
    # The same stream with the cores free: the second chunk runs the rest of the flow.
    again = model.encode_prior(ids, ZERO, None)
    for a, b in spans[:2]:
        decode_span(model, again, a, b, 16, HOP)
    assert again.ready == again.frames


def _on_a_thread(offered: list[threading.Thread]) -> Callable[..., Callable[[], FloatArray]]:
    """A ``beside`` that runs each offered run on a thread of its own, as a free core."""

    def beside(run: Callable[[], FloatArray], *, wait: bool = False) -> Callable[[], FloatArray]:
        box: list[FloatArray] = []
        t = threading.Thread(target=lambda: box.append(run()))
        t.start()
        offered.append(t)

        def result() -> FloatArray:
            t.join()
            return box[0]

        return result

    return beside


def test_with_a_core_beside_a_window_is_decoded_in_two_halves_at_once_and_still_exact() -> None:
    """``beside`` (a free core): each decode of at least SPLIT_MIN_FRAMES is two runs, the
    second offered to the other core; the samples are still the fused model's."""
    model, ids = model_and_ids()
    fused = model.fused(ids, ZERO, None)
    counting = RecordingModel(model)
    enc = counting.encode_prior(ids, ZERO, None)
    offered: list[threading.Thread] = []
    beside = _on_a_thread(offered)
    spans = chunks_of(enc.frames, [8, 18, 37] + [69] * 20)
    out = np.concatenate(
        [decode_span(counting, enc, a, b, 16, HOP, beside=beside) for a, b in spans]
    )
    assert offered, "no window was long enough to split"
    assert max(counting.decoded) <= -(-(AHEAD_MAX_FRAMES + 69) // 2) + 2 * 16
    assert out.shape == fused.shape
    assert float(np.max(np.abs(out - fused))) <= CUT_TOLERANCE


def test_with_a_core_beside_a_long_clause_s_flow_runs_in_two_halves_and_still_exact() -> None:
    """A later clause encoded ahead (``flow_all``): its flow is two runs of half the clause
    and ``flow_context`` frames at the split, the second on the other core; the latent is
    the one-run flow's, and the audio the fused model's.  With no core free it is one run."""
    model, _ = model_and_ids()
    ids = long_ids()
    whole = model.encode(ids, ZERO, None)
    counting = RecordingModel(model)
    enc = counting.encode_prior(ids, ZERO, None)
    assert enc.frames >= SPLIT_MIN_FLOW_FRAMES
    offered: list[threading.Thread] = []
    flow_all(counting, enc, _on_a_thread(offered))
    c, half = model.flow_context, enc.frames // 2
    assert len(offered) == 1 and enc.ready == enc.frames and enc.z_p is None
    assert sorted(counting.flows) == sorted([half + c, enc.frames - half + c])
    assert float(np.max(np.abs(enc.z - whole.z))) <= 1e-6  # 0.0 here
    audio = decode_span(model, enc, 0, enc.frames, 16, HOP)
    fused = model.fused(ids, ZERO, None)
    assert float(np.max(np.abs(audio - fused))) <= CUT_TOLERANCE

    alone = RecordingModel(model)
    enc = alone.encode_prior(ids, ZERO, None)
    flow_all(alone, enc, lambda run, wait=False: run)  # no core may take it
    assert alone.flows == [enc.frames] and enc.z_p is None
    assert float(np.max(np.abs(enc.z - whole.z))) <= 1e-6  # 0.0 here


def test_with_a_core_beside_the_second_chunk_runs_the_rest_of_the_flow_in_halves() -> None:
    """A first sentence's second chunk runs the flow over the rest of it: with a core
    beside, as two halves at once (the second on that core); the audio is the fused
    model's all the same."""
    model, _ = model_and_ids()
    ids = long_ids()
    fused = model.fused(ids, ZERO, None)
    counting = RecordingModel(model)
    enc = counting.encode_prior(ids, ZERO, None)
    offered: list[threading.Thread] = []
    first = decode_span(counting, enc, 0, 8, 16, HOP)  # as the first item: no core beside
    ready = enc.ready
    assert counting.flows == [ready + model.flow_context]
    assert enc.frames - ready >= SPLIT_MIN_FLOW_FRAMES
    second = decode_span(counting, enc, 8, 26, 16, HOP, beside=_on_a_thread(offered))
    c, half = model.flow_context, (enc.frames - ready) // 2
    assert enc.ready == enc.frames and len(offered) >= 1
    first_half = min(ready, c) + half + c  # its context reaches back to frame 0 at most
    assert sorted(counting.flows[1:]) == sorted([first_half, enc.frames - ready - half + c])
    rest = decode_span(model, enc, 26, enc.frames, 16, HOP)
    audio = np.concatenate([first, second, rest])
    assert float(np.max(np.abs(audio - fused))) <= CUT_TOLERANCE


def test_a_second_chunk_whose_flow_nobody_takes_keeps_the_flows_bound() -> None:
    """With no core free to take half (``beside`` hands the run back), the second chunk
    runs the rest of the flow as it would without a core beside: at most
    ``MAX_FLOW_FRAMES`` (and its context) in one call, the rest later."""
    model, _ = model_and_ids()
    ids = long_ids()
    counting = RecordingModel(model)
    enc = counting.encode_prior(ids, ZERO, None)
    decode_span(counting, enc, 0, 8, 16, HOP)
    assert enc.frames - enc.ready > MAX_FLOW_FRAMES
    decode_span(counting, enc, 8, 26, 16, HOP, beside=lambda run, wait=False: run)
    assert max(counting.flows[1:]) <= MAX_FLOW_FRAMES + 2 * model.flow_context
    assert enc.ready < enc.frames
