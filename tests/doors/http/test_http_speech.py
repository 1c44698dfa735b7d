"""POST /v1/audio/speech on the real daemon: the official openai client and plain HTTP."""

from __future__ import annotations

import asyncio
import base64
import json
import time

import aiohttp
import numpy as np
import openai
import pytest

from appliance.clients.client import Client
from tests.asr import recognize, word_errors
from tests.doors.http.conftest import HttpDaemon, decode

SENTENCES = [
    ("Please turn on the kitchen lights.", "please turn on the kitchen lights"),
    (
        "The next train leaves from platform two in five minutes.",
        "the next train leaves from platform two in five minutes",
    ),
    ("Good morning! It is sunny and warm today.", "good morning it is sunny and warm today"),
]
LONG = (
    "The morning train was late again, so Anna walked along the river instead. "
    "The water was high after the rain, and the ducks had claimed the footpath. "
    "At the top of the hill there is a small stone chapel. "
    "Nobody knows who built it, but every spring someone paints the door blue. "
) * 3


def openai_client(d: HttpDaemon) -> openai.OpenAI:
    return openai.OpenAI(base_url=d.v1, api_key=d.key or "unused", max_retries=0, timeout=60)


def speak_openai(d: HttpDaemon, text: str, fmt: str, **kw: object) -> tuple[bytes, dict[str, str]]:
    client = openai_client(d)
    with client.audio.speech.with_streaming_response.create(
        model="tts-1",
        voice="alloy",
        input=text,
        response_format=fmt,
        **kw,  # type: ignore[arg-type]
    ) as resp:
        return resp.read(), dict(resp.headers)


ZERO = {"noise_scale": 0.0, "noise_w": 0.0}
"""ttsd's extension fields: no sampling noise, so every rendering is the same audio."""


@pytest.fixture(scope="module")
def baseline(http_daemon: HttpDaemon) -> list[np.ndarray]:
    """Protocol v1's PCM for the same sentences, from the same daemon, without noise."""
    with Client(http_daemon.daemon.socket) as client:
        return [
            np.frombuffer(client.synthesize_all(text, **ZERO).audio, "<i2")  # type: ignore[arg-type]
            for text, _ref in SENTENCES
        ]


@pytest.fixture(scope="module")
def baseline_errors(baseline: list[np.ndarray]) -> list[int]:
    """The recogniser's word errors on each of ``baseline``'s sentences: the same for every
    format below, so recognised once (each format's test did it again)."""
    return [
        word_errors(ref, recognize(v1, 22050))[0]
        for (_text, ref), v1 in zip(SENTENCES, baseline, strict=True)
    ]


@pytest.mark.parametrize("fmt", ["wav", "pcm", "flac", "mp3", "opus"])
def test_every_format_streams_and_decodes_to_the_same_words(
    http_daemon: HttpDaemon, baseline: list[np.ndarray], baseline_errors: list[int], fmt: str
) -> None:
    errors = total = 0
    for (text, ref), v1 in zip(SENTENCES, baseline, strict=True):
        data, headers = speak_openai(http_daemon, text, fmt, extra_body=ZERO)
        assert headers["transfer-encoding"] == "chunked"
        rate = int(headers["x-sample-rate"])
        audio, decoded_rate = decode(data, fmt, rate)
        assert decoded_rate == rate
        assert 0.8 < len(audio) / rate < 10.0, (fmt, len(audio), rate)
        if fmt in ("wav", "pcm", "flac"):
            # Lossless: the very samples protocol v1 sends.
            assert np.array_equal(audio, v1), fmt
        e, n = word_errors(ref, recognize(audio, rate))
        errors += e
        total += n
    base_errors = sum(baseline_errors)
    # Lossy codecs at speech bit rates cost a word at most over the three sentences.
    assert errors <= base_errors + 1, (fmt, errors, base_errors)
    assert errors / total < 0.5


def test_opus_is_resampled_to_a_rate_opus_takes(http_daemon: HttpDaemon) -> None:
    _data, headers = speak_openai(http_daemon, "Hello.", "opus")
    assert int(headers["x-sample-rate"]) in (8000, 12000, 16000, 24000, 48000)
    assert headers["content-type"] == "audio/ogg"


def test_sse_events_parse_and_carry_the_audio(
    http_daemon: HttpDaemon, baseline: list[np.ndarray]
) -> None:
    data, headers = speak_openai(
        http_daemon, SENTENCES[0][0], "pcm", extra_body={"stream_format": "sse", **ZERO}
    )
    assert headers["content-type"].startswith("text/event-stream")
    events = [
        json.loads(block.removeprefix("data: "))
        for block in data.decode().split("\n\n")
        if block.strip()
    ]
    kinds = [e["type"] for e in events]
    assert kinds[-1] == "speech.audio.done" and set(kinds[:-1]) == {"speech.audio.delta"}
    assert len(kinds) >= 3  # several deltas: the audio streamed, not one blob
    usage = events[-1]["usage"]
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    audio, rate = decode(pcm, "pcm", int(headers["x-sample-rate"]))
    # Without sampling noise the deltas carry protocol v1's very samples, and the words
    # are the same every run (with the voice's noise this six-word sentence failed the
    # recogniser now and then).
    assert np.array_equal(audio, baseline[0])
    e, n = word_errors(SENTENCES[0][1], recognize(audio, rate))
    assert e / n < 0.5


def test_speed_up_to_4_and_clamped_below_half(http_daemon: HttpDaemon) -> None:
    text = SENTENCES[1][0]
    normal, h1 = speak_openai(http_daemon, text, "pcm", speed=1.0, extra_body=ZERO)
    fast, h4 = speak_openai(http_daemon, text, "pcm", speed=4.0, extra_body=ZERO)
    slow, h025 = speak_openai(http_daemon, text, "pcm", speed=0.25, extra_body=ZERO)
    assert (h1["x-speed-applied"], h4["x-speed-applied"], h025["x-speed-applied"]) == (
        "1",
        "4",
        "0.5",
    )
    # 4x (past 2x the voice is time-stretched): a quarter as long; 0.5x (clamped, not
    # 0.25x): about twice as long (the voice's rounding keeps it from exact).
    assert 0.2 < len(fast) / len(normal) < 0.3, (len(fast), len(normal))
    assert 1.4 < len(slow) / len(normal) < 2.6, (len(slow), len(normal))


def test_voice_names_openai_names_and_the_map(http_daemon: HttpDaemon) -> None:
    client = openai_client(http_daemon)
    for voice in ("en_US-joe-medium", "alloy", "nova", "Shimmer"):
        with client.audio.speech.with_streaming_response.create(
            model="tts-1", voice=voice, input="Hi.", response_format="pcm"
        ) as resp:
            assert resp.headers["x-voice"] == "en_US-joe-medium"
            assert len(resp.read()) > 1000
    with pytest.raises(openai.BadRequestError) as err:
        client.audio.speech.create(model="tts-1", voice="nobody", input="Hi.")
    assert err.value.code == "unknown_voice"


def test_models_and_voices_list(http_daemon: HttpDaemon) -> None:
    client = openai_client(http_daemon)
    assert [m.id for m in client.models.list()] == ["ttsd"]

    async def voices() -> dict[str, object]:
        async with aiohttp.ClientSession() as s, s.get(http_daemon.v1 + "/audio/voices") as r:
            assert r.status == 200
            body: dict[str, object] = await r.json()
            return body

    body = asyncio.run(voices())
    assert body["voices"] == [
        {
            "id": "en_US-joe-medium",
            "name": "en_US-joe-medium",
            "language": "en_US",
            "sample_rate": 22050,
            "speakers": [],
        }
    ]
    assert body["openai_aliases"]["alloy"] == "en_US-joe-medium"  # type: ignore[index]


async def _first_and_last_byte(url: str, text: str) -> tuple[float, float, int, int]:
    async with aiohttp.ClientSession() as s:
        t0 = time.monotonic()
        async with s.post(url, json={"input": text, "response_format": "pcm"}) as r:
            assert r.status == 200
            first = await r.content.readany()
            t_first = time.monotonic()
            rest = await r.read()
            t_end = time.monotonic()
    return t_first - t0, t_end - t0, len(first), len(first) + len(rest)


def test_first_bytes_leave_long_before_synthesis_ends(http_daemon: HttpDaemon) -> None:
    t_first, t_end, first, total = asyncio.run(
        _first_and_last_byte(http_daemon.v1 + "/audio/speech", LONG)
    )
    print(f"long text: first bytes after {t_first * 1000:.0f} ms, all after {t_end * 1000:.0f} ms")
    # Streamed: what arrived first is a small part of the audio, and the rest came later.
    assert first < total / 10, (first, total)
    assert t_first < t_end / 4, (t_first, t_end)
