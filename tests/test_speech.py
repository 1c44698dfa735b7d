"""The limits of request fields (appliance.speech.LIMITS): stated once, held by every door.

Each numeric field's range is written in appliance/speech.py only; SpeechRequest.validate,
protocol v1, the HTTP door and the ElevenLabs door accept a value at each end of it and
refuse one just past it, each in its own error shape.  No daemon: the doors' parsers are
called as the doors call them.
"""

from __future__ import annotations

import ast
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

import appliance
from appliance.doors.elevenlabs.messages import BadMessage, ClientMessage
from appliance.doors.http.request import BadField, SpeechBody
from appliance.doors.v1.protocol import SynthesizeRequest
from appliance.errors import ErrorCode, ServiceError
from appliance.speech import LIMITS, SpeechRequest

REQUEST_FIELDS = ("speed", "noise_scale", "noise_w", "volume", "keepalive_ms")
"""The ranged fields of SpeechRequest itself (pace_ms and sample_rate are the doors')."""


def _edges(key: str) -> tuple[list[float], list[float]]:
    """Values at the ends of ``key``'s range, and values just past them."""
    lo, hi = LIMITS[key]
    step = 1 if isinstance(lo, int) and isinstance(hi, int) else 0.01
    return [lo, hi], [lo - step, hi + step]


@pytest.mark.parametrize("key", REQUEST_FIELDS)
def test_speech_request_validate_holds_each_limit(key: str) -> None:
    ok, bad = _edges(key)
    for value in ok:
        SpeechRequest(text="x", **{key: value}).validate()
    for value in bad:
        with pytest.raises(ServiceError) as err:
            SpeechRequest(text="x", **{key: value}).validate()
        assert err.value.code == ErrorCode.BAD_REQUEST and f"'{key}'" in str(err.value)


@pytest.mark.parametrize("key", sorted(LIMITS))
def test_protocol_v1_holds_each_limit(key: str) -> None:
    lo, hi = LIMITS[key]
    ok, bad = _edges(key)
    for value in ok:
        req = SynthesizeRequest.from_dict({"op": "synthesize", "id": 1, "text": "x", key: value})
        assert getattr(req, key) == value
    for value in bad:
        with pytest.raises(ServiceError) as err:
            SynthesizeRequest.from_dict({"op": "synthesize", "id": 1, "text": "x", key: value})
        assert err.value.code == ErrorCode.BAD_REQUEST
        assert err.value.message == f"'{key}' must be between {lo} and {hi}"


@pytest.mark.parametrize("key", ["noise_scale", "noise_w", "sample_rate", "pace_ms"])
def test_the_http_door_holds_each_limit_it_takes(key: str) -> None:
    ok, bad = _edges(key)
    base: dict[str, Any] = {"input": "x", "response_format": "pcm"}
    for value in ok:
        assert getattr(SpeechBody.from_dict({**base, key: value}), key) == value
    for value in bad:
        with pytest.raises(BadField) as err:
            SpeechBody.from_dict({**base, key: value})
        assert err.value.param == key and err.value.code == ErrorCode.BAD_REQUEST


def test_the_http_door_clamps_to_the_one_speed_range() -> None:
    """OpenAI's 0.25 is taken (OpenAI allows it) and clamped to ttsd's own lower end."""
    lo, _hi = LIMITS["speed"]
    assert SpeechBody.from_dict({"input": "x", "speed": 0.25}).applied_speed() == lo


def test_the_elevenlabs_door_holds_the_speed_limit() -> None:
    ok, bad = _edges("speed")
    for value in ok:
        msg = ClientMessage.parse(json.dumps({"text": "x", "voice_settings": {"speed": value}}))
        assert msg.speed == value
    for value in bad:
        with pytest.raises(BadMessage):
            ClientMessage.parse(json.dumps({"text": "x", "voice_settings": {"speed": value}}))


def _literal_pairs(tree: ast.AST) -> set[tuple[float, float]]:
    """Every two numbers written side by side: a tuple's, a call's arguments, the bounds of
    a chained comparison (``lo <= x <= hi``)."""
    pairs: set[tuple[float, float]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Tuple | ast.List):
            items = node.elts
        elif isinstance(node, ast.Call):
            items = node.args
        elif isinstance(node, ast.Compare) and [type(op) for op in node.ops] == [ast.LtE] * 2:
            items = [node.left, node.comparators[1]]
        else:
            continue
        nums = [
            n.value for n in items if isinstance(n, ast.Constant) and type(n.value) in (int, float)
        ]
        pairs.update(itertools.pairwise(nums))
    return pairs


NOT_REQUEST_FIELDS = {
    "speech.py": "the table itself",
    "text/ssml.py": "the clamp of nested <prosody volume> factors, SSML's own",
    "model/voices/pair.py": "the sample rates a voice's config may name",
}
"""Modules whose equal-looking ranges are other things than a request field's limit."""


def test_each_limit_is_written_only_in_speech_py() -> None:
    """A door that writes a range again (``0.0 <= value <= 2.0``, ``(8000, 192000)``) would
    drift from the table; speech.py is the one place."""
    ranges = {(float(lo), float(hi)) for lo, hi in LIMITS.values()}
    root = Path(appliance.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        if str(path.relative_to(root)) in NOT_REQUEST_FIELDS:
            continue
        pairs = {(float(a), float(b)) for a, b in _literal_pairs(ast.parse(path.read_text()))}
        found += [f"{path.relative_to(root)}: {p}" for p in sorted(pairs & ranges)]
    assert not found, found
