"""No encoder call takes more than engine.max_phonemes ids (the encoder's memory grows
about quadratically with them): the pieces, and their joined latent on the real voice."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import psutil

from appliance.core.wordtimes import spoken_words
from appliance.model.engine.base import Encoded, Scales, VoiceModel
from appliance.model.engine.bounded import Pieces
from appliance.model.engine.windows import decode_span
from appliance.speech import IntArray
from appliance.text.phonemize import Phonemizer
from tests.conftest import DaemonFactory
from tests.fakes.voice import RecordingModel, real_voice
from tests.wire import Wire

TEXT = (
    "The committee met on a cold and windy morning to review the proposal for the new "
    "library building which would replace the old structure in the town square."
)


def test_pieces_are_bounded_and_cut_after_word_gaps() -> None:
    voice, _ = real_voice()
    ph = Phonemizer(voice.info)
    ids = ph.ids(TEXT)
    ranges = Pieces(64, ph.is_space).ranges(ids)
    assert ranges[0][0] == 2 and ranges[-1][1] == len(ids) - 1
    assert all(b - a + 3 <= 64 for a, b in ranges)
    assert all(ranges[i][1] == ranges[i + 1][0] for i in range(len(ranges) - 1))
    for _, b in ranges[:-1]:
        assert ph.is_space(int(ids[b - 2]))  # each piece ends with a word gap and its pad
    # A "word" with no gap at all is cut at the bound, a phoneme and its pad together.
    word = np.asarray([1, 0, *([14, 0] * 200), 2], dtype=np.int64)
    ranges = Pieces(64, ph.is_space).ranges(word)
    assert all(b - a + 3 <= 64 and (b - a) % 2 == 0 for a, b in ranges[:-1])


def test_a_long_clause_is_encoded_in_bounded_pieces_and_joined() -> None:
    voice, cpu = real_voice()
    ph = Phonemizer(voice.info)
    ids = ph.ids(TEXT)
    scales = Scales(0.0, 1.0, 0.0)

    model = RecordingModel(cpu)
    joined, enc = Pieces(100, ph.is_space).encode(model, ids, scales, None, prior=False)
    assert len(model.encodes) >= 3 and max(model.encodes) <= 100
    assert len(joined) == sum(model.encodes) and enc.durations.shape == joined.shape
    assert enc.frames == int(enc.durations.sum())
    audio = decode_span(cpu, enc, 0, enc.frames, 16, voice.info.hop_length)
    assert audio.shape[0] == enc.frames * voice.info.hop_length
    # Within the bound nothing changes: one call, the ids as they are.
    same, whole = Pieces(1024, ph.is_space).encode(cpu, ids, scales, None, prior=False)
    assert same is ids and whole.frames == cpu.encode(ids, scales, None).frames
    # A voice that cannot stream: the fused model in pieces.
    assert Pieces(100, ph.is_space).fused(cpu, ids, scales, None).shape[0] > 0


def test_one_request_cannot_take_gigabytes_in_the_encoder(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """A lexicon respelling is applied after the sentence is cut: 30 × "zorkzorkzork"
    respelled to 62 characters (within the lexicon's own bound on respellings) is one
    clause of ~3 800 phoneme ids, and one encoder call on it held ~0.7 GB more (4 000
    ids: 2.4 GB).  In pieces of engine.max_phonemes: ~0.1 GB."""
    lexicon = tmp_path / "lexicon.yaml"
    respelling = " ".join(["supercalifragilistic"] * 3)
    lexicon.write_text(f'en:\n  zorkzorkzork: {{say: "{respelling}"}}\n', encoding="utf-8")
    d = daemon_factory({"voices": {"lexicon": str(lexicon)}})
    with Wire(d.socket) as w:
        assert w.call({"op": "ping", "id": 1})["event"] == "pong"
        base = psutil.Process(d.proc.pid).memory_info().rss / 1e6
        w.send({"op": "synthesize", "id": 2, "text": " ".join(["zorkzorkzork"] * 30) + "."})
        evs = w.until(2)
    assert evs[-1]["event"] == "end", evs[-1]
    assert evs[-1]["stats"]["audio_ms"] > 30 * 2000  # all of it said
    grown = psutil.Process(d.proc.pid).memory_info().rss / 1e6 - base
    assert grown < 300, f"RSS grew by {grown:.0f} MB"


class _AnchorsSeen(RecordingModel):
    """Records the ids and anchors of each encoder call."""

    def __init__(self, inner: VoiceModel) -> None:
        super().__init__(inner)
        self.calls: list[tuple[IntArray, tuple[int, ...]]] = []

    def encode_prior(self, ids: IntArray, scales: Scales, speaker: int | None) -> Encoded:
        self.calls.append((ids, scales.anchors))
        return super().encode_prior(ids, scales, speaker)


def test_each_piece_gets_its_own_word_starts() -> None:
    """Re-timed in pieces, each piece's anchors are the clause's word starts inside it, at
    their places in the piece's own ids (after the start pair it is wrapped in)."""
    voice, cpu = real_voice()
    ph = Phonemizer(voice.info)
    ids = ph.ids(TEXT)
    starts = tuple(a for a, _ in spoken_words(ids, ph.kinds))
    model = _AnchorsSeen(cpu)
    scales = Scales(0.0, 1.0, 0.0, rate=1.25, anchors=starts)
    Pieces(100, ph.is_space).encode(model, ids, scales, None, prior=True)
    ranges = Pieces(100, ph.is_space).ranges(ids)
    assert len(model.calls) == len(ranges) >= 3
    for (piece, anchors), (a, b) in zip(model.calls, ranges, strict=True):
        assert anchors == tuple(p - a + 2 for p in starts if a <= p < b)
        assert all(piece[q] == ids[q - 2 + a] for q in anchors)
