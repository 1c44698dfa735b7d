"""The voice model exactly as the daemon builds it (``Runtime.load``, bundled voice)."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from appliance.core.pipeline import encode
from appliance.core.pipeline.types import VoiceCosts
from appliance.core.runtime import Runtime
from appliance.core.service import Service
from appliance.core.streaming import SynthesisJob, VoiceRuntime
from appliance.core.warmup import ClauseWarmUp, IdleWarmUp
from appliance.model.engine.base import Scales, Window
from appliance.model.engine.interrupt import Interrupted
from appliance.model.engine.onnx import OnnxVoiceModel
from appliance.model.engine.pool import FailoverVoiceModel
from appliance.model.engine.sessions import open_session
from appliance.model.engine.windows import decode_span
from appliance.model.margins import MarginCrops
from appliance.ops.config import parse_config
from appliance.speech import Chunk, FloatArray, SpeechRequest
from tests.fakes.voice import RecordingModel


@pytest.fixture(scope="module")
def runtime(voice_cache: Path) -> Iterator[Runtime]:
    # Two intra-op threads, as on the 2-core machines this is built for, whatever CI has.
    cfg = parse_config(
        {
            "voices": {"cache_dir": str(voice_cache)},
            "engine": {"workers": 1, "intra_op_threads": 2},
        }
    )
    rt = Runtime.load(cfg)
    yield rt
    rt.close()


def test_the_first_clause_flow_is_windowed_in_the_daemons_model(runtime: Runtime) -> None:
    voice = runtime.voices[runtime.default_voice]
    assert runtime.info()["voices"][0]["flow"] == "windowed"
    model = voice.model
    ids = voice.phonemizer.ids("Turn left in two hundred metres.")
    enc = model.encode_prior(ids, voice.defaults, voice.default_speaker)
    # The prior only: z is left for the flow to fill window by window.
    assert model.flow_context > 0
    assert enc.ready == 0 and enc.z_p is not None
    # The first chunk runs the flow over its own frames (plus context), not the clause.
    first = 24
    audio = decode_span(model, enc, 0, first, 16, voice.hop)
    assert audio.shape[0] == first * voice.hop
    assert first + 16 <= enc.ready < enc.frames


def test_the_daemons_flow_crops_its_margins_after_each_layer(runtime: Runtime) -> None:
    """Each coupling layer's output is cropped to what the layers after it reach (24, 16
    and 8 frames): a window's z is exactly the whole window's, through the wrapper."""
    voice = runtime.voices[runtime.default_voice]
    cpu = voice.model.cpu
    assert isinstance(cpu, OnnxVoiceModel)
    assert cpu.margin_crops("flow") == MarginCrops(((1, 24), (1, 16), (1, 8)))
    ids = voice.phonemizer.ids("Turn left in two hundred metres, then keep right.")
    z_p = voice.model.encode_prior(ids, voice.defaults, voice.default_speaker).z_p
    assert z_p is not None and z_p.shape[2] > 100
    window = np.ascontiguousarray(z_p[:, :, :100])
    whole = voice.model.flow(Window(window, None))
    for left, right in ((0, 32), (32, 32), (5, 32), (32, 3)):
        got = voice.model.flow(Window(window, None, (left, right)))
        np.testing.assert_allclose(got, whole[:, :, left : 100 - right], rtol=0, atol=1e-6)


def test_windows_use_the_voices_verified_context(runtime: Runtime) -> None:
    """The daemon's model decodes with the fewest context frames the cut's check passed
    (10 for the bundled voice), and the windows still match the fused model."""
    from appliance.model.engine.windows import decode_windows
    from appliance.model.voices import CUT_TOLERANCE

    voice = runtime.voices[runtime.default_voice]
    assert voice.context == 10
    assert runtime.info()["voices"][0]["context_frames"] == 10
    ids = voice.phonemizer.ids("Turn left in two hundred metres, then keep right.")
    scales = Scales(0.0, voice.defaults.length_scale, 0.0)
    fused = voice.model.fused(ids, scales, voice.default_speaker)
    for window in (8, 24, 69):
        enc = voice.model.encode_prior(ids, scales, voice.default_speaker)
        windowed = decode_windows(voice.model, enc, window, voice.context, voice.hop)
        assert windowed.shape == fused.shape
        assert float(np.max(np.abs(windowed - fused))) <= CUT_TOLERANCE
    # Two frames fewer is measurably off: the check is not passing everything.
    enc = voice.model.encode_prior(ids, scales, voice.default_speaker)
    short = decode_windows(voice.model, enc, 8, voice.context - 2, voice.hop)
    assert float(np.max(np.abs(short - fused))) > CUT_TOLERANCE


def test_configured_context_overrides_the_voices(voice_cache: Path) -> None:
    cfg = parse_config(
        {
            "voices": {"cache_dir": str(voice_cache)},
            "engine": {"workers": 1, "context_frames": 16},
        }
    )
    rt = Runtime.load(cfg)
    try:
        assert rt.voices[rt.default_voice].context == 16
    finally:
        rt.close()


def _latent(voice: VoiceRuntime, frames: int) -> FloatArray:
    ids = voice.phonemizer.ids("Turn left in two hundred metres, then keep right.")
    z = voice.model.encode(ids, voice.defaults, voice.default_speaker).z
    return np.ascontiguousarray(z[:, :, :frames])


def test_the_daemons_model_decodes_ahead_in_2d_and_first_chunks_in_1d(
    runtime: Runtime, voice_cache: Path
) -> None:
    """Windows decoded ahead run the 2-D decoder on one thread (the cheapest), a window a
    listener waits for the 1-D one on every thread (the fastest), both cropping their
    margins: each is bit for bit what its own decoder gives, through the failover wrapper
    the daemon builds."""
    voice = runtime.voices[runtime.default_voice]
    meta = voice.source
    assert meta.lean_decoder_path is not None and meta.cut is not None
    assert meta.margin_decoder_path is not None
    assert runtime.info()["voices"][0]["decoder"] == "2d"
    assert runtime.info()["voices"][0]["margins"] == "cropped"
    assert isinstance(voice.model, FailoverVoiceModel)
    z = _latent(voice, 30)

    def own(dec: Path, lean: Path | None, threads: int) -> OnnxVoiceModel:
        return OnnxVoiceModel.load(
            meta.model_path, meta.encoder_path, dec, meta.cut, threads, lean_decoder=lean
        )

    lean_model = own(meta.margin_decoder_path, meta.lean_decoder_path, 1)
    parallel_model = own(meta.margin_decoder_path, None, 2)
    for margins in ((0, 0), (0, 10), (10, 10)):
        ahead, urgent = Window(z, None, margins), Window(z, None, margins, urgent=True)
        lean = lean_model.decode(ahead)
        parallel = parallel_model.decode(urgent)
        np.testing.assert_array_equal(voice.model.decode(ahead), lean)
        np.testing.assert_array_equal(voice.model.decode(urgent), parallel)
        assert lean.shape == ((30 - sum(margins)) * 256,)
        assert not np.array_equal(lean, parallel)  # two graphs, really
        assert float(np.max(np.abs(lean - parallel))) < 1e-5
    # The cropped graphs are the ones in use (their samples are the plain graphs' too).
    cpu = voice.model.cpu
    assert isinstance(cpu, OnnxVoiceModel)
    assert (
        cpu.margin_crops("urgent")
        == cpu.margin_crops("ahead")
        == MarginCrops(((8, 1), (64, 1), (256, 1)))
    )
    assert meta.decoder_path is not None
    plain = open_session(meta.decoder_path, 2).run(None, {meta.cut.z: z})[0].reshape(-1)
    assert float(np.max(np.abs(voice.model.decode(Window(z, None, urgent=True)) - plain))) < 1e-5


@pytest.mark.parametrize(
    ("mode", "realtime", "first_urgent"),
    [
        ("dialog", True, True),
        ("reading", True, True),
        ("sentence", True, False),
        ("dialog", False, False),
    ],
)
def test_only_a_streamed_first_chunk_is_urgent(
    runtime: Runtime, mode: str, realtime: bool, first_urgent: bool
) -> None:
    """A real-time request's first chunk waits for the fastest decoder; every later window,
    a whole-sentence first chunk and a batch request's take the cheapest."""
    name = runtime.default_voice
    voice = runtime.voices[name]
    recorder = RecordingModel(voice.model)
    recording = dataclasses.replace(
        runtime, voices={**runtime.voices, name: dataclasses.replace(voice, model=recorder)}
    )

    async def run() -> int:
        service = Service(recording)
        text = "Turn left in two hundred metres. Then keep right at the big roundabout."
        stream = await service.open_stream(
            SpeechRequest(text=text, mode=mode, realtime=realtime), door="test"
        )
        chunks: list[Chunk] = []

        async def emit(chunk: Chunk) -> None:
            chunks.append(chunk)

        await stream.run(emit)
        return len(chunks)

    chunks = asyncio.run(run())
    assert chunks >= 2
    urgent = [u for _, u in recorder.decodes]
    assert urgent[0] is first_urgent
    assert not any(urgent[1:]), recorder.decodes


def test_in_a_crowd_a_stream_takes_the_cheapest_decoder_and_decodes_nothing_ahead(
    runtime: Runtime,
) -> None:
    """While another worker runs due work, a newcomer's first chunk keeps to one core
    (the 2-D decoder) and every later chunk is decoded on its own, nothing ahead: on the
    daemon's model, through the service and a real two-worker scheduler."""
    from tests.fakes.work import run_blocking, running_scheduler

    name = runtime.default_voice
    voice = runtime.voices[name]
    recorder = RecordingModel(voice.model)
    with running_scheduler(2, name="crowd") as crowd:
        crowded = dataclasses.replace(
            runtime,
            scheduler=crowd,
            voices={**runtime.voices, name: dataclasses.replace(voice, model=recorder)},
        )

        async def run() -> list[Chunk]:
            import time

            busy, busy_fut = await run_blocking(crowd, time.monotonic(), owner="other")
            service = Service(crowded)
            text = "Turn left in two hundred metres. Then keep right at the big roundabout."
            stream = await service.open_stream(SpeechRequest(text=text), door="test")
            chunks: list[Chunk] = []

            async def emit(chunk: Chunk) -> None:
                chunks.append(chunk)

            await stream.run(emit)
            busy.finish.set()
            await busy_fut
            return chunks

        chunks = asyncio.run(run())
    assert len(chunks) >= 3
    assert not any(u for _, u in recorder.decodes), recorder.decodes
    # One decode per chunk, each no larger than its chunk and the context on both sides.
    assert len(recorder.decodes) == len(chunks)
    for (frames, _), chunk in zip(recorder.decodes, chunks, strict=True):
        assert frames <= len(chunk.samples) // voice.hop + 2 * voice.context


def test_admission_starts_from_what_start_up_measured(runtime: Runtime) -> None:
    """A fresh daemon admits by the cost its own warm-up measured on this machine, not a
    fixed guess (0.15 refused the sixth of eight streams started together here)."""
    from appliance.core.admission import RTF_PRIOR

    cost = runtime.stream_cost
    assert cost is not None and 0.0 < cost < 1.0  # CPU seconds per audio second
    assert cost != RTF_PRIOR

    async def estimate() -> float:
        return Service(runtime).admission.rtf([])

    assert asyncio.run(estimate()) == pytest.approx(cost)


def _linked_cache(shared: Path, dest: Path) -> Path:
    """A voice cache of its own whose cuts are the shared cache's files (linked, not
    copied): what a test writes beside a cut stays out of every other test's cache."""
    for entry in shared.iterdir():
        if entry.is_dir():
            (dest / entry.name).mkdir(parents=True)
            for f in entry.iterdir():
                if not f.name.startswith(("costs-", ".")):
                    (dest / entry.name / f.name).symlink_to(f)
        elif not entry.name.startswith("."):
            (dest / entry.name).symlink_to(entry)
    return dest


def test_a_start_uses_the_costs_its_last_start_kept_and_keeps_its_own(
    voice_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 42: the first clause measured before serving took ~0.7 s of a ~1 s warm-up.
    A voice whose costs the last start on this machine kept starts from those, without
    that clause; its later clause, measured as before, replaces and keeps them."""
    from appliance.model.voices.costs import StoredCosts, read_costs, write_costs

    cfg = parse_config({"voices": {"cache_dir": str(_linked_cache(voice_cache, tmp_path))}})
    clauses: list[bool] = []
    real = Runtime.warm_clause

    def counted(rt: Runtime, v: VoiceRuntime, first: bool) -> float | None:
        clauses.append(first)
        return real(rt, v, first)

    monkeypatch.setattr(Runtime, "warm_clause", counted)
    kept = StoredCosts(stream_cost=0.0123, first_decode_s=0.0045, prior_s_per_id=6.7e-5)
    first = Runtime.load(cfg, warm=False)
    try:
        voice = first.voices[first.default_voice]
        assert voice.costs.stream_cost is None  # nothing kept yet: measured before serving
        first.warm_first_packets()
        assert clauses == [True] and first.stream_cost is not None
        write_costs(voice.source, voice.model.backend_name, kept)
    finally:
        first.close()
    clauses.clear()
    rt = Runtime.load(cfg, warm=False)
    try:
        voice = rt.voices[rt.default_voice]
        rt.warm_first_packets()
        assert clauses == [] and rt.stream_cost == kept.stream_cost
        assert (voice.costs.first_decode_s, voice.costs.prior_s_per_id) == (0.0045, 6.7e-5)
        measured = rt.warm_later()
        assert clauses == [False] and measured is not None and measured != kept.stream_cost
        again = read_costs(voice.source, voice.model.backend_name)
        assert again is not None and again.stream_cost == measured
    finally:
        rt.close()


MEDIUM = "The morning train was late again, so Anna walked along the river instead."
"""More than a second of audio after its first chunk, too short for a quick start."""
BARE = (
    "The maintenance crew will replace the broken escalator on the north side of the "
    "station before the morning rush begins tomorrow."
)


def _stream(
    runtime: Runtime, req: SpeechRequest, seen: Callable[[Chunk], None] | None = None
) -> tuple[list[Chunk], dict[str, object]]:
    async def run() -> tuple[list[Chunk], dict[str, object]]:
        service = Service(runtime)
        stream = await service.open_stream(req, door="test")
        chunks: list[Chunk] = []

        async def emit(chunk: Chunk) -> None:
            if seen is not None:
                seen(chunk)
            chunks.append(chunk)

        result = await stream.run(emit)
        return chunks, result.stats

    return asyncio.run(run())


def _with_costs(
    runtime: Runtime,
    prior_s_per_id: float,
    text: str = BARE,
    seen: Callable[[Chunk], None] | None = None,
    **opts: Any,
) -> tuple[list[Chunk], dict[str, object]]:
    """A long first sentence, noise off, with the prior's cost estimate pinned (what the
    warm-up measured on a quiet two-core box is ~1e-4 s per id)."""
    costs = runtime.voices[runtime.default_voice].costs
    saved = (costs.prior_s_per_id, costs.first_decode_s)
    costs.prior_s_per_id, costs.first_decode_s = prior_s_per_id, 0.008
    try:
        req = SpeechRequest(text=text, noise_scale=0.0, noise_w=0.0, **opts)
        return _stream(runtime, req, seen)
    finally:
        costs.prior_s_per_id, costs.first_decode_s = saved


def _whole(runtime: Runtime) -> FloatArray:
    voice = runtime.voices[runtime.default_voice]
    return voice.model.fused(voice.phonemizer.ids(BARE), Scales(0.0, 1.0, 0.0), None)


def test_a_long_first_sentence_starts_quick_and_joins_the_whole_sentence(
    runtime: Runtime,
) -> None:
    """The first chunk comes from a quick encoding of the first words; from the join (within
    250 ms) on, every sample is the whole sentence's, and the length is within 1 %."""
    chunks, stats = _with_costs(runtime, 1e-4)
    assert stats["quick_start"]
    assert chunks[0].duration_ms <= 250
    assert chunks[0].text_span[1] <= len("The maintenance")  # the first words only
    got = np.concatenate([c.samples for c in chunks])
    want = _whole(runtime)
    shift = len(got) - len(want)
    assert abs(shift) <= 0.01 * len(want)
    t = round(0.25 * runtime.voices[runtime.default_voice].sample_rate)
    assert float(np.max(np.abs(got[t:] - want[t - shift :]))) <= 1e-4


NO_GAP = (  # a first word longer than the join's window, with no stop in it
    "Marshmallows melting slowly over the warm campfire filled the evening air with a sweet "
    "smell that reminded everyone of their summer holidays by the lake."
)


def test_a_first_word_longer_than_the_window_starts_quick_and_joins_without_a_click(
    runtime: Runtime,
) -> None:
    """Issue 46: no word gap and no stop in the join's window, so the first packet waited
    for the whole prior.  The join now falls at a phoneme's onset inside the first word:
    the first chunk is quick, every sample after 250 ms is the whole sentence's, and the
    crossfaded join has no step or loudness the whole rendering lacks there."""
    chunks, stats = _with_costs(runtime, 1e-4, text=NO_GAP)
    assert stats["quick_start"]
    assert chunks[0].duration_ms <= 250 and chunks[0].text_span == (0, len("Marshmallows"))
    got = np.concatenate([c.samples for c in chunks])
    voice = runtime.voices[runtime.default_voice]
    want = voice.model.fused(voice.phonemizer.ids(NO_GAP), Scales(0.0, 1.0, 0.0), None)
    shift = len(got) - len(want)
    assert abs(shift) <= 0.01 * len(want)
    t = round(0.25 * voice.sample_rate)
    assert float(np.max(np.abs(got[t:] - want[t - shift :]))) <= 1e-4
    # Around the join (the crossfade starts where the first chunk ends): 10 ms frames.
    j, ms10 = len(chunks[0].samples), voice.sample_rate // 100
    for a in range(j - 3 * ms10, j + 3 * ms10, ms10):
        ours, theirs = got[a : a + ms10], want[a - shift : a - shift + ms10]
        assert np.max(np.abs(np.diff(ours))) <= 1.5 * np.max(np.abs(np.diff(theirs))) + 0.01
        rms = float(np.sqrt(np.mean(ours**2)))
        whole = float(np.sqrt(np.mean(theirs**2)))
        assert 0.4 * whole - 0.005 <= rms <= 2.0 * whole + 0.005, (a - j, rms, whole)


def test_fast_speech_starts_quick_too(runtime: Runtime) -> None:
    """Past the voice's speed (time-stretched) a long first sentence starts quick as well,
    its join within 250 ms as heard; the length is still 1/speed, and the words are timed
    in order inside the audio."""
    chunks, stats = _with_costs(runtime, 1e-4, speed=3.0, word_timings=True)
    assert stats["quick_start"]
    assert chunks[0].duration_ms <= 250
    assert chunks[0].text_span[1] < len(BARE) // 2
    got = sum(len(c.samples) for c in chunks)
    want = len(_whole(runtime))
    assert abs(got * 3.0 / want - 1.0) < 0.05, got * 3.0 / want
    words = [w for c in chunks for w in c.words or ()]
    assert [BARE[a:b] for a, b in (w.text_span for w in words)] == BARE.split()
    offsets = [w.offset_ms for w in words]
    assert offsets == sorted(offsets)
    total_ms = sum(c.duration_ms for c in chunks)
    assert offsets[-1] + words[-1].duration_ms <= total_ms + 12.0


PRICED = "It costs $49.95 today, Dr. Smith, and the museum opens at nine."
LONG_WORD = (  # no word gap in the join's window: the join is at a stop inside a word
    "Counterproductive bureaucratic procedures delayed the construction of the new "
    "hospital wing by several months."
)


@pytest.mark.parametrize("text", [BARE, PRICED, LONG_WORD, NO_GAP])
@pytest.mark.parametrize("speed", [1.0, 1.25, 2.0, 3.0])
def test_words_around_a_quick_starts_join(runtime: Runtime, speed: float, text: str) -> None:
    """After a quick start, each word comes with the chunk its sound starts in, and ends
    before the next begins: the words heard before the join are timed from the quick
    encoding, the rest from the whole one (a word the join cuts at a stop goes with the
    first chunk, its end from the quick frames; the next word starts after it)."""
    chunks, stats = _with_costs(runtime, 1e-4, text, speed=speed, word_timings=True)
    assert stats["quick_start"]
    for c in chunks:
        for w in c.words or ():
            assert c.offset_ms - 1e-6 <= w.offset_ms < c.offset_ms + c.duration_ms
    words = [w for c in chunks for w in c.words or ()]
    assert len(words) == len(text.split())
    for w, nxt in itertools.pairwise(words):
        assert w.offset_ms + w.duration_ms <= nxt.offset_ms + 1e-6, (w, nxt)


COMMITTEE = (  # espeak says "on a", "to review", "for the" as one word each
    "The committee met on a cold and windy morning to review the proposal for the new "
    "library building, which would replace the old reading room that had served the "
    "town for more than sixty years."
)


def _count_sizing(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch, delay_s: float = 0.0
) -> tuple[list[str], list[int], Callable[[Chunk], None]]:
    """The tokens the phonemizer sizes for word timings (each ``delay_s`` slower), and how
    many it had sized when the first chunk went out (recorded by the ``seen`` returned)."""
    ph = runtime.voices[runtime.default_voice].phonemizer
    size = ph.word_size
    sized: list[str] = []
    at_first: list[int] = []

    def counting(token: str) -> int:
        if delay_s:
            time.sleep(delay_s)
        sized.append(token)
        return size(token)

    def seen(chunk: Chunk) -> None:
        if chunk.seq == 0:
            at_first.append(len(sized))

    monkeypatch.setattr(ph, "word_size", counting)
    return sized, at_first, seen


@pytest.mark.parametrize("prior_s_per_id", [1e-4, 1e-2])  # a quick start; encoded whole
def test_a_first_sentences_later_words_are_found_after_its_first_chunk(
    runtime: Runtime, prior_s_per_id: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Word timings cost the first packet only the first words' work (issue 29): before
    the first chunk goes out, the alignment has sized the first tokens only; the rest are
    found with the next chunk, and every word still comes with the chunk its sound
    starts in, once, in order."""
    sized, at_first, seen = _count_sizing(runtime, monkeypatch)
    chunks, stats = _with_costs(runtime, prior_s_per_id, COMMITTEE, seen, word_timings=True)
    assert stats["quick_start"] == (prior_s_per_id < 1e-3)
    tokens = COMMITTEE.split()
    assert 0 < at_first[0] <= len(tokens) // 2, (at_first, len(tokens))
    assert sized == tokens  # each sized once, the rest after the first chunk
    for c in chunks:
        for w in c.words or ():
            assert c.offset_ms - 1e-6 <= w.offset_ms < c.offset_ms + c.duration_ms
    words = [w for c in chunks for w in c.words or ()]
    assert [COMMITTEE[a:b] for a, b in (w.text_span for w in words)] == tokens
    for w, nxt in itertools.pairwise(words):
        assert w.offset_ms + w.duration_ms <= nxt.offset_ms + 1e-6, (w, nxt)


@pytest.mark.parametrize("prior_s_per_id", [1e-4, 1e-2])  # a quick start; encoded whole
def test_the_word_work_a_first_packet_waits_for_is_its_own_part(
    runtime: Runtime, prior_s_per_id: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``end``'s ``ttfp_parts_ms.words`` is the word work the first packet waited for (the
    bench's measure of issue 29's cost): with each token's sizing made 3 ms slow, at least
    3 ms per token sized before the first chunk; absent without word timings."""
    _, at_first, seen = _count_sizing(runtime, monkeypatch, delay_s=0.003)
    _, stats = _with_costs(runtime, prior_s_per_id, COMMITTEE, seen, word_timings=True)
    parts = stats["ttfp_parts_ms"]
    assert isinstance(parts, dict)
    assert at_first[0] > 0 and parts["words"] >= 3 * at_first[0], (parts, at_first)
    # Its own part: the parts before the first packet add up to no more than its ttfp.
    before = ("frontend", "queue", "encode", "first_decode", "words")
    assert sum(parts[k] for k in before) <= stats["ttfp_ms"] + 0.05, (parts, stats)
    _, plain = _with_costs(runtime, prior_s_per_id, COMMITTEE)
    assert isinstance(plain["ttfp_parts_ms"], dict) and "words" not in plain["ttfp_parts_ms"]


def _on_later_encodes(
    monkeypatch: pytest.MonkeyPatch, note: Callable[[SynthesisJob], None]
) -> None:
    """``note(job)`` as each later clause's encode is submitted (the first clause's is
    ``encode_first``)."""
    original = SynthesisJob._submit

    def recording(
        job: SynthesisJob, fn: Any, kind: str, ahead_s: float = 0.0, urgent: bool = False
    ) -> Any:
        if isinstance(fn, functools.partial) and fn.func is encode.encode_clause:
            note(job)
        return original(job, fn, kind, ahead_s, urgent)

    monkeypatch.setattr(SynthesisJob, "_submit", recording)


@pytest.mark.parametrize(
    ("first", "lone", "after"),
    [(BARE, False, 2), ("Hello there.", False, 1), (MEDIUM, False, 2), (MEDIUM, True, 1)],
)
def test_a_long_first_sentence_encodes_the_next_after_its_second_chunk(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch, first: str, lone: bool, after: int
) -> None:
    """Beside other requests' work, the second chunk of a long first sentence has the
    cores to itself: the next sentence's encode is submitted after it, not beside it (an
    encode beside it stretched it past the first chunk's audio: stalls at a newcomer's
    arrival); a short first sentence's next is submitted after its first chunk, as before.
    Alone, the next is submitted after the first chunk whatever its length: the second
    chunk's flow takes the other core first (a part goes before work ahead), the encode
    follows on whichever core comes free (a whole request read as fast as it comes waited
    ~25 ms less)."""
    submitted: list[int] = []
    _on_later_encodes(monkeypatch, lambda job: submitted.append(job.timeline.seq))
    monkeypatch.setattr(runtime.scheduler, "lone", lambda owner: lone)
    req = SpeechRequest(text=f"{first} And then we went home.", noise_scale=0.0, noise_w=0.0)
    chunks, _ = _stream(runtime, req)
    assert submitted == [after], (submitted, len(chunks))


@pytest.mark.parametrize(("lone", "ahead"), [(True, 2), (False, 1)])
def test_a_lone_request_encodes_two_clauses_ahead(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch, lone: bool, ahead: int
) -> None:
    """While its work is all the scheduler has, a request keeps its next two clauses
    encoding (a whole request ran its last long prior alone at its end); beside other work,
    one.  The audio is the same."""
    depths: list[int] = []  # each among those encoded ahead when submitted
    _on_later_encodes(monkeypatch, lambda job: depths.append(len(job.ahead) + 1))
    monkeypatch.setattr(runtime.scheduler, "lone", lambda owner: lone)
    text = "Hello there. It is cold today. Take a coat. And a hat. Then go home."
    req = SpeechRequest(text=text, noise_scale=0.0, noise_w=0.0)
    chunks, _ = _stream(runtime, req)
    assert len(depths) == 4 and max(depths) == ahead, depths
    monkeypatch.setattr(runtime.scheduler, "lone", lambda owner: not lone)
    again, _ = _stream(runtime, req)
    got = np.concatenate([c.samples for c in chunks])
    assert np.array_equal(got, np.concatenate([c.samples for c in again]))


@pytest.mark.parametrize(
    ("own_cores", "lone", "at"), [(True, True, 0), (True, False, 1), (False, True, 1)]
)
def test_alone_on_cores_of_its_own_the_next_sentence_encodes_beside_the_first_item(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch, own_cores: bool, lone: bool, at: int
) -> None:
    """Where each worker has a core of its own, a lone request submits its next sentence's
    encode with its first item (before any chunk is out: the scheduler runs it on the
    idle core); beside other work, or on shared cores, after its first chunk as before.
    The audio is the same (within the 1e-4 of any two window plans: how far ahead a window
    decodes follows the load, and the blocked decoder's sums differ by ~1e-7 between
    window widths)."""
    submitted: list[int] = []
    _on_later_encodes(monkeypatch, lambda job: submitted.append(job.timeline.seq))
    monkeypatch.setattr(runtime.scheduler, "lone", lambda owner: lone)
    monkeypatch.setattr(runtime.scheduler, "own_cores", own_cores)
    req = SpeechRequest(text="Hello there. And then we went home.", noise_scale=0.0, noise_w=0.0)
    chunks, _ = _stream(runtime, req)
    assert submitted == [at], submitted
    monkeypatch.setattr(runtime.scheduler, "own_cores", not own_cores)
    again, _ = _stream(runtime, req)
    got = np.concatenate([c.samples for c in chunks])
    want = np.concatenate([c.samples for c in again])
    assert got.shape == want.shape
    assert float(np.max(np.abs(got - want))) <= 1e-4


def test_no_quick_start_where_the_whole_prior_could_not_be_hidden(runtime: Runtime) -> None:
    """A prior estimated far longer than 250 ms of audio lasts (a slow or busy box): the
    sentence is encoded whole from the start, never cut, and every sample is piper's."""
    chunks, stats = _with_costs(runtime, 1e-2)
    assert not stats["quick_start"]
    got = np.concatenate([c.samples for c in chunks])
    want = _whole(runtime)
    assert got.shape == want.shape
    assert float(np.max(np.abs(got - want))) <= 1e-4


def test_a_plain_start_teaches_the_prior_estimate_back_to_quick_starts(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An estimate too high for any quick start (a start's stale stored costs, one slow
    whole prior) used to stay: only a quick start's whole prior was observed, and none came.
    A plain start's prior is observed too, so the next long sentences start quick again.

    Each start's real observation is recorded; the estimate is taught a fixed fast figure
    in its place, so that a box loaded well past its cores (where the measured prior is
    itself too slow for a quick start, rightly) cannot decide the outcome."""
    costs = runtime.voices[runtime.default_voice].costs
    saved = (costs.prior_s_per_id, costs.first_decode_s)
    costs.prior_s_per_id, costs.first_decode_s = 3e-3, 0.008
    observed: list[tuple[int, float]] = []

    def observe_prior(ids: int, seconds: float) -> None:
        observed.append((ids, seconds))
        VoiceCosts.observe_prior(costs, ids, ids * 1e-5)

    monkeypatch.setattr(costs, "observe_prior", observe_prior)
    monkeypatch.setattr(costs, "observe_first_decode", lambda seconds: None)
    try:
        starts, seen = [], []
        for _ in range(20):
            req = SpeechRequest(text=BARE, noise_scale=0.0, noise_w=0.0)
            starts.append(bool(_stream(runtime, req)[1]["quick_start"]))
            seen.append(costs.prior_s_per_id)
            if starts[-1]:
                break
        assert not starts[0] and starts[-1], (starts, seen)
        # Every start observed its real prior once: the plain ones as well as the quick
        # one (whose quick item, having run no whole prior, reports none).
        timed = [(ids, seconds) for ids, seconds in observed if seconds > 0]
        assert len(timed) == len(starts) and all(ids >= 40 for ids, _ in timed), observed
        assert seen == sorted(seen, reverse=True), seen
    finally:
        costs.prior_s_per_id, costs.first_decode_s = saved


# ------------------------------------------------------------------ start-up warm-up


class _CountingModel(RecordingModel):
    """Also counts flow runs, and stops (as the scheduler does for a newcomer) the decode
    call numbered ``stop_at``."""

    def __init__(self, inner: OnnxVoiceModel | FailoverVoiceModel, stop_at: int = -1) -> None:
        super().__init__(inner)
        self.flows = 0
        self.stop_at = stop_at

    def flow(self, window: Window) -> FloatArray:
        self.flows += 1
        return super().flow(window)

    def decode(self, window: Window) -> FloatArray:
        if len(self.decodes) == self.stop_at:
            self.stop_at = -1
            raise Interrupted("decoder")
        return super().decode(window)

    def runs(self) -> int:
        return len(self.encodes) + len(self.decodes) + self.flows


def test_a_later_clause_warms_up_in_short_steps(runtime: Runtime) -> None:
    """The daemon runs it as batch work step by step: the workers' heartbeat is renewed
    between steps (the whole clause as one item took 20 s on a busy box: health said
    ``failing``), and each step is over as soon as a newcomer's first item needs it."""
    voice = runtime.voices[runtime.default_voice]
    model = _CountingModel(voice.model)  # type: ignore[arg-type]
    job = ClauseWarmUp(dataclasses.replace(voice, model=model), first=False)
    per_step = []
    while not job.done:
        before = model.runs()
        job.step()
        per_step.append(model.runs() - before)
    # The first chunks' three widths are one step; everything else is a run or two.
    assert max(per_step) <= 6 and sorted(per_step)[-2] <= 2, per_step
    assert len(per_step) >= 8, per_step
    assert job.cost() is not None and 0.0 < job.cost() < 1.0  # type: ignore[operator]


def test_a_warm_up_step_stopped_for_a_newcomer_runs_again(runtime: Runtime) -> None:
    """The scheduler queues a stopped item again: the same step, run again, goes on
    where the clause was."""
    voice = runtime.voices[runtime.default_voice]
    model = _CountingModel(voice.model, stop_at=5)  # type: ignore[arg-type]
    job = ClauseWarmUp(dataclasses.replace(voice, model=model), first=False)
    stopped = steps = 0
    while not job.done:
        steps += 1
        try:
            job.step()
        except Interrupted:
            stopped += 1
    assert stopped == 1 and steps < 40
    straight = _CountingModel(voice.model)  # type: ignore[arg-type]
    ClauseWarmUp(dataclasses.replace(voice, model=straight), first=False).run()
    assert model.encodes == straight.encodes  # (the decodes' frames: durations are sampled)
    assert job.cost() is not None


def test_first_packets_are_warm_and_admission_measured_before_requests(
    voice_cache: Path,
) -> None:
    """What the daemon does before it takes requests (issue 42): first packets on every
    worker at once and a first clause, which measures the cost admission plans with (the
    fixed guess refused three of eight requests sent at once)."""
    cfg = parse_config({"voices": {"cache_dir": str(voice_cache)}, "engine": {"workers": 2}})
    rt = Runtime.load(cfg, warm=False)
    try:

        async def warm() -> bool:
            return Service(rt).warm

        assert rt.stream_cost is None and not asyncio.run(warm())
        rt.warm_first_packets()
        assert rt.first_packets_warm and asyncio.run(warm())
        assert rt.stream_cost is not None and 0.0 < rt.stream_cost < 1.0
    finally:
        rt.close()


def test_the_rest_of_the_warm_up_waits_while_requests_are_in_flight(runtime: Runtime) -> None:
    """The daemon's background warm-up (IdleWarmUp) runs nothing while a request is in
    flight, then every voice's later clause, and measures when nothing ran beside it."""
    busy = {"until": time.monotonic() + 0.5}

    def in_flight() -> bool:
        return time.monotonic() < busy["until"]

    async def go() -> tuple[float | None, int]:
        idle = IdleWarmUp(list(runtime.voices.values()), runtime.scheduler, in_flight)
        task = asyncio.create_task(idle.run())
        before = runtime.scheduler.completed
        await asyncio.sleep(0.4)
        ran_while_busy = runtime.scheduler.completed - before
        return await task, ran_while_busy

    cost, ran_while_busy = asyncio.run(go())
    assert ran_while_busy == 0
    assert cost is not None and 0.0 < cost < 1.0
