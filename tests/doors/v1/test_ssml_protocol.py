"""Protocol v1 messages of issue 16: text_format on synthesize/speak, the phonemes op."""

from __future__ import annotations

import pytest

from appliance.doors.v1.protocol import PhonemesRequest, SynthesizeRequest, parse_request
from appliance.errors import ErrorCode, ServiceError


def test_text_format_round_trip() -> None:
    req = parse_request({"op": "synthesize", "id": 1, "text": "<speak/>", "text_format": "ssml"})
    assert isinstance(req, SynthesizeRequest) and req.text_format == "ssml"
    assert parse_request(req.to_dict()) == req
    plain = parse_request({"op": "speak", "id": 2, "text": "hi"})
    # None: the door's default (v1.text_format), text unless the config says otherwise.
    assert isinstance(plain, SynthesizeRequest) and plain.text_format is None
    assert plain.speech().text_format == "text"
    assert plain.speech("markdown").text_format == "markdown"
    md = parse_request({"op": "synthesize", "id": 5, "text": "**x**", "text_format": "markdown"})
    assert isinstance(md, SynthesizeRequest) and md.speech().text_format == "markdown"


def test_phonemes_round_trip() -> None:
    msg = {"op": "phonemes", "id": 3, "text": "hi", "voice": "v", "text_format": "ssml"}
    req = parse_request(msg)
    assert req == PhonemesRequest(id=3, text="hi", voice="v", text_format="ssml")
    assert req.to_dict() == msg
    assert parse_request({"op": "phonemes", "id": 4, "text": "x"}).to_dict() == {
        "op": "phonemes",
        "id": 4,
        "text": "x",
    }


@pytest.mark.parametrize(
    "msg",
    [
        {"op": "phonemes", "id": 1},
        {"op": "phonemes", "id": 1, "text": 3},
        {"op": "phonemes", "id": 1, "text": "x", "text_format": "html"},
        {"op": "phonemes", "id": 1, "text": "x", "voice": 7},
        {"op": "synthesize", "id": 1, "text": "x", "text_format": "rtf"},
    ],
)
def test_bad_messages(msg: dict[str, object]) -> None:
    with pytest.raises(ServiceError) as exc:
        parse_request(msg)
    assert exc.value.code == ErrorCode.BAD_REQUEST
