"""Protocol v1 message types: validation in from_dict, to_dict round trips."""

from __future__ import annotations

import msgpack
import pytest

from appliance.doors.v1.protocol import (
    CancelRequest,
    ChunkEvent,
    EndEvent,
    ErrorEvent,
    FrameReader,
    ProtocolError,
    SimpleRequest,
    StartEvent,
    SynthesizeRequest,
    make_unpacker,
    pack,
    parse_request,
    request_id_of,
)
from appliance.errors import ServiceError


def test_synthesize_roundtrip() -> None:
    req = SynthesizeRequest.from_dict(
        {
            "op": "synthesize",
            "id": 3,
            "text": "hi",
            "speed": 1.5,
            "format": "f32le",
            "realtime": False,
        }
    )
    assert req.speed == 1.5 and req.format == "f32le" and req.realtime is False
    again = parse_request(req.to_dict())
    assert again == req


def test_defaults_are_none_for_model_defaults() -> None:
    req = parse_request({"op": "synthesize", "id": 1, "text": "x"})
    assert isinstance(req, SynthesizeRequest)
    assert req.speed is None and req.noise_scale is None and req.noise_w is None
    assert req.format == "s16le" and req.volume == 1.0 and req.realtime is True


def test_speak_has_priority_and_no_format() -> None:
    req = parse_request({"op": "speak", "id": 1, "text": "x", "priority": "important"})
    assert isinstance(req, SynthesizeRequest) and req.priority == "important"
    with pytest.raises(ProtocolError):
        parse_request({"op": "speak", "id": 1, "text": "x", "format": "s16le"})
    with pytest.raises(ProtocolError):
        parse_request({"op": "speak", "id": 1, "text": "x", "priority": "urgent"})


def test_simple_and_cancel() -> None:
    assert parse_request({"op": "ping", "id": 9}) == SimpleRequest("ping", 9)
    assert parse_request({"op": "cancel", "id": 2, "target": 1}) == CancelRequest(2, 1)


@pytest.mark.parametrize("bad_id", [None, "1", 1.0, True, [1]])
def test_id_must_be_int(bad_id: object) -> None:
    with pytest.raises(ProtocolError) as info:
        parse_request({"op": "ping", "id": bad_id})
    assert info.value.code == "bad_request"
    assert request_id_of({"id": bad_id}) is None


def test_unknown_op_keeps_id() -> None:
    with pytest.raises(ProtocolError) as info:
        parse_request({"op": "dance", "id": 5})
    assert info.value.code == "unknown_op"
    assert request_id_of({"op": "dance", "id": 5}) == 5


def test_events_to_dict_keep_audio_binary() -> None:
    chunk = ChunkEvent(1, 0, b"\x00\x01", 0.0, 11.6, (0, 5), True).to_dict()
    packed = pack(chunk)
    back = msgpack.unpackb(packed, raw=False)
    assert isinstance(back["audio"], bytes) and back["text_span"] == [0, 5]
    assert StartEvent(1, 22050, "s16le", "v").to_dict()["channels"] == 1
    assert EndEvent(1, False, {"chunks": 1}).to_dict()["cancelled"] is False
    err = ErrorEvent.from_exc(2, ProtocolError("busy", "later", retry_after_ms=200)).to_dict()
    assert err == {
        "id": 2,
        "event": "error",
        "code": "busy",
        "message": "later",
        "retry_after_ms": 200,
    }


def test_unpacker_caps_message_size() -> None:
    u = make_unpacker(1024)
    with pytest.raises(msgpack.BufferFull):
        u.feed(b"\x00" * 2048)


def test_frame_reader_takes_any_batching_of_messages_within_the_cap() -> None:
    """Issue 32, item 7: what is left of one message plus a whole read never overflows."""
    reader = FrameReader(1024)
    msgs = [{"op": "ping", "id": i, "pad": "x" * 700} for i in range(20)]
    stream = b"".join(msgpack.packb(m) for m in msgs)
    got = []
    for cut in range(0, len(stream), reader.read_size):  # reads as large as allowed
        reader.feed(stream[cut : cut + reader.read_size])
        while True:
            whole, msg = reader.next_message()
            if not whole:
                break
            got.append(msg)
    assert got == msgs and not reader.partial


@pytest.mark.parametrize("first", [100, 700, 1000])
def test_a_message_just_over_the_cap_is_refused_however_it_is_split(first: int) -> None:
    """msgpack's ``tell`` moves past a container's parts read so far: a 1 026-byte message
    whose first read ended inside its second string was once taken whole under a 1 024
    cap (measured from where the second read began)."""
    reader = FrameReader(1024)
    ok = msgpack.packb({"op": "ping", "id": 1})
    big = msgpack.packb({"op": "ping", "id": 1, "a": "x" * 500, "b": "y" * 503})
    assert len(big) == 1026
    reader.feed(ok + big[:first])
    assert reader.next_message() == (True, {"op": "ping", "id": 1})
    assert reader.next_message() == (False, None)
    reader.feed(big[first:])
    with pytest.raises(ServiceError) as caught:
        reader.next_message()
    assert caught.value.code == "frame_too_large"


def test_frame_reader_refuses_one_message_over_the_cap() -> None:
    reader = FrameReader(1024)
    big = msgpack.packb({"op": "ping", "id": 1, "pad": "x" * 1500})
    reader.feed(big[:1024])
    assert reader.next_message() == (False, None)
    reader.feed(big[1024:])
    with pytest.raises(ServiceError) as caught:
        reader.next_message()
    assert caught.value.code == "frame_too_large"
    # and one still arriving, past the cap, is refused before it is whole
    reader = FrameReader(1024)
    reader.feed(b"\xdb" + (10**6).to_bytes(4, "big") + b"x" * 1019)
    reader.next_message()
    reader.feed(b"x" * 10)
    with pytest.raises(ServiceError):
        reader.next_message()
