"""The ``word_timings`` fields of protocol v1, without a daemon: parsing, chunk ``words``,
``end.heard``, and the wire staying as it was without them."""

from __future__ import annotations

import numpy as np
import pytest

from appliance.doors.v1.protocol import (
    ChunkEvent,
    EndEvent,
    SynthesizeRequest,
    parse_request,
)
from appliance.errors import ServiceError
from appliance.speech import Chunk, Word


def test_word_timings_is_parsed_and_reaches_the_core() -> None:
    for op in ("synthesize", "speak"):
        req = parse_request({"op": op, "id": 1, "text": "Hi.", "word_timings": True})
        assert isinstance(req, SynthesizeRequest)
        assert req.word_timings and req.speech().word_timings
        assert req.to_dict()["word_timings"] is True
        plain = parse_request({"op": op, "id": 1, "text": "Hi."})
        assert isinstance(plain, SynthesizeRequest)
        assert not plain.speech().word_timings and "word_timings" not in plain.to_dict()


@pytest.mark.parametrize("bad", [1, "yes", [True]])
def test_word_timings_must_be_a_bool(bad: object) -> None:
    with pytest.raises(ServiceError) as exc:
        parse_request({"op": "synthesize", "id": 1, "text": "Hi.", "word_timings": bad})
    assert exc.value.code == "bad_request"


def chunk(words: tuple[Word, ...] | None) -> Chunk:
    samples = np.zeros(256, dtype=np.float32)
    return Chunk(0, samples, 22050, 0.0, 11.61, (0, 3), True, words=words)


def test_chunk_words_on_the_wire_only_when_asked() -> None:
    assert "words" not in ChunkEvent.from_chunk(1, chunk(None), b"").to_dict()
    assert ChunkEvent.from_chunk(1, chunk(()), b"").to_dict()["words"] == []
    words = (Word((0, 6), 11.60999, 81.2706), Word((7, 13), 150.0, 40.0))
    d = ChunkEvent.from_chunk(1, chunk(words), b"").to_dict()
    assert d["words"] == [
        {"text_span": [0, 6], "offset_ms": 11.61, "duration_ms": 81.271},
        {"text_span": [7, 13], "offset_ms": 150.0, "duration_ms": 40.0},
    ]


def test_end_heard_only_when_known() -> None:
    assert "heard" not in EndEvent(1, True).to_dict()
    assert EndEvent(1, True, {}, False, (0, 17)).to_dict()["heard"] == [0, 17]
