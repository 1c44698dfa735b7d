"""The HTTP door's body → request mapping, without a daemon or a socket.

Every field of ``POST /v1/audio/speech`` is checked in one place
(:mod:`appliance.doors.http.request`): each bad one is ``bad_request`` naming its
``param``; what passes becomes the core's :class:`~appliance.speech.SpeechRequest`.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from appliance.doors.http.errors import error_response, raw_response
from appliance.doors.http.request import BadField, SpeechBody, voice_and_speaker
from appliance.errors import ErrorCode, ServiceError
from appliance.ops.config import HttpConfig

VOICES = frozenset({"en_US-joe-medium", "de_DE-x-low"})


def refused(d: Any) -> BadField:
    with pytest.raises(BadField) as caught:
        SpeechBody.from_dict(d)
    return caught.value


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ([], ""),
        ({}, "input"),
        ({"input": 3}, "input"),
        ({"input": "x", "voice": ""}, "voice"),
        ({"input": "x", "voice": {"id": 7}}, "voice"),
        ({"input": "x", "response_format": "ogg"}, "response_format"),
        ({"input": "x", "response_format": ["mp3"]}, "response_format"),
        ({"input": "x", "speed": 0.2}, "speed"),
        ({"input": "x", "speed": "fast"}, "speed"),
        ({"input": "x", "speed": True}, "speed"),
        ({"input": "x", "speed": float("nan")}, "speed"),
        ({"input": "x", "speed": 10**400}, "speed"),
        ({"input": "x", "stream_format": "ws"}, "stream_format"),
        ({"input": "x", "model": 1}, "model"),
        ({"input": "x", "noise_scale": 2.5}, "noise_scale"),
        ({"input": "x", "noise_w": -0.1}, "noise_w"),
        ({"input": "x", "text_format": "html"}, "text_format"),
        ({"input": "x", "stream": "no"}, "stream"),
        ({"input": "x", "word_timings": 1}, "word_timings"),
        ({"input": "x", "response_format": "pcm", "sample_rate": 4000}, "sample_rate"),
        ({"input": "x", "response_format": "mp3", "sample_rate": 16000}, "sample_rate"),
        ({"input": "x", "response_format": "pcm", "pace_ms": 2}, "pace_ms"),
        ({"input": "x", "response_format": "pcm", "stream": False, "pace_ms": 20}, "pace_ms"),
        ({"input": "x", "stream": False, "stream_format": "sse"}, "stream_format"),
        ({"input": "x", "response_format": "pcm", "pace_ms": 20, "visemes": True}, "visemes"),
        ({"input": "x", "deterministic": "yes"}, "deterministic"),
    ],
)
def test_each_bad_field_is_bad_request_naming_its_param(body: Any, param: str) -> None:
    exc = refused(body)
    assert (exc.code, exc.param) == (ErrorCode.BAD_REQUEST, param), exc.message
    resp = error_response(exc, exc.param or None)
    assert resp.status == 400
    assert resp.text is not None
    err = json.loads(resp.text)["error"]
    assert err["type"] == "invalid_request_error" and err["param"] == (param or None)


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"{nope", "not valid JSON"),
        (b"\xff\xfe{", "not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
        (b'"a string"', "must be a JSON object"),
    ],
)
def test_a_body_that_is_not_an_object_is_refused_not_raised(raw: bytes, says: str) -> None:
    with pytest.raises(BadField) as caught:
        SpeechBody.parse(raw)
    assert says in caught.value.message and caught.value.param == ""


def test_openai_names_map_through_voice_map_with_a_speaker() -> None:
    vmap = {"alloy": "en_US-joe-medium:3", "nova": "de_DE-x-low"}
    assert voice_and_speaker("Alloy", VOICES, vmap) == ("en_US-joe-medium", "3")
    assert voice_and_speaker("nova", VOICES, vmap) == ("de_DE-x-low", None)
    assert voice_and_speaker("echo", VOICES, vmap) == (None, None)  # unmapped: the default
    assert voice_and_speaker("de_DE-x-low", VOICES, {"de_DE-x-low": "x"}) == ("de_DE-x-low", None)
    assert voice_and_speaker("nobody", VOICES, vmap) == ("nobody", None)  # the core refuses it
    assert voice_and_speaker(None, VOICES, vmap) == (None, None)


def test_the_request_the_core_gets() -> None:
    cfg = HttpConfig(voice_map={"alloy": "en_US-joe-medium"}, text_format="markdown")
    body = SpeechBody.from_dict(
        {"input": "Hi.", "voice": "alloy", "speed": 0.25, "noise_scale": 0.0, "visemes": True,
         "stream_format": "sse", "deterministic": True}
    )  # fmt: skip
    req = body.to_request(False, cfg, VOICES)
    assert (req.text, req.voice, req.speaker, req.speed) == ("Hi.", "en_US-joe-medium", None, 0.5)
    assert (req.noise_scale, req.text_format, req.visemes, req.deterministic) == (
        0.0,
        "markdown",
        True,
        True,
    )
    assert not req.word_timings
    vtt = SpeechBody.from_dict({"input": "Hi.", "response_format": "vtt", "text_format": "text"})
    req = vtt.to_request(False, cfg, VOICES)
    assert req.word_timings and req.text_format == "text" and vtt.whole
    assert SpeechBody.from_dict({"input": "x"}).to_request(True, cfg, VOICES).word_timings
    assert SpeechBody.from_dict({"input": "x", "stream": False}).whole
    assert not SpeechBody.from_dict({"input": "x"}).whole


def test_what_only_one_endpoint_takes() -> None:
    cfg = HttpConfig()
    vtt = SpeechBody.from_dict({"input": "x", "response_format": "vtt"})
    with pytest.raises(BadField) as caught:
        vtt.to_request(True, cfg, VOICES)  # captioned speech is audio
    assert caught.value.param == "response_format"
    shapes = SpeechBody.from_dict({"input": "x", "visemes": True})
    with pytest.raises(BadField) as caught:
        shapes.to_request(False, cfg, VOICES)  # visemes come as events
    assert caught.value.param == "visemes"
    assert shapes.to_request(True, cfg, VOICES).visemes


def test_the_error_shape_is_one_for_every_status() -> None:
    busy = ServiceError(ErrorCode.BUSY, "busy", retry_after_ms=1500)
    resp = error_response(busy)
    assert resp.status == 429 and resp.headers["Retry-After"] == "2"
    assert resp.text is not None
    err = json.loads(resp.text)["error"]
    assert (err["type"], err["retry_after_ms"]) == ("rate_limit_error", 1500)
    key = error_response(ServiceError(ErrorCode.UNAUTHORIZED, "no"))
    assert key.status == 401 and key.headers["WWW-Authenticate"] == "Bearer"
    raw = raw_response(431, ErrorCode.FRAME_TOO_LARGE, "the request head is too large")
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n")
    assert b"Connection: close" in head and f"Content-Length: {len(body)}".encode() in head
    assert json.loads(body)["error"] == {
        "message": "the request head is too large",
        "type": "invalid_request_error",
        "code": "frame_too_large",
        "param": None,
    }
