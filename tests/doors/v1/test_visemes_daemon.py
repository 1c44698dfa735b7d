"""Visemes through the real daemon (protocol v1 ``visemes``): the chunks' shapes tile the
audio exactly, in order, at any speed, across SSML breaks and clause pauses, across the
eager start's join (the quick start's: tests/core/test_visemetimes.py); a known word's
shapes are the ones it makes.

Zero noise, so the same text gives the same audio."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import numpy as np
import pytest

from appliance.clients.client import AsyncClient, Client
from appliance.doors.v1.protocol import ChunkEvent, ProtocolError, SynthesizeRequest
from appliance.speech import Viseme
from appliance.text.visemes import VISEMES
from tests.conftest import Daemon
from tests.doors.v1.test_word_timings import FRAME_MS, LONG, RATE, ZERO


def run(daemon: Daemon, text: str, **opts: Any) -> tuple[np.ndarray, list[dict[str, Any]]]:
    with Client(daemon.socket) as c:
        events = list(c.synthesize(text, visemes=True, **{**ZERO, **opts}))
    assert events[-1]["event"] == "end", events[-1]
    chunks = [e for e in events if e["event"] == "chunk"]
    audio = np.concatenate([np.frombuffer(e["audio"], dtype="<f4") for e in chunks])
    return audio, chunks


def shapes(chunks: list[dict[str, Any]]) -> list[tuple[str, float, float]]:
    """The request's visemes (name, offset, duration), each chunk's checked to tile it."""
    out: list[tuple[str, float, float]] = []
    for c in chunks:
        v = c["visemes"]
        assert len(v["viseme"]) == len(v["offset_ms"]) == len(v["duration_ms"]) > 0
        at = c["offset_ms"]
        for code, offset, duration in zip(
            v["viseme"], v["offset_ms"], v["duration_ms"], strict=True
        ):
            assert offset == pytest.approx(at, abs=2e-3) and duration > 0, (c["seq"], v)
            at = offset + duration
            out.append((VISEMES[code], offset, duration))
        assert at == pytest.approx(c["offset_ms"] + c["duration_ms"], abs=5e-3)
        names = [VISEMES[code] for code in v["viseme"]]
        assert all(a != b for a, b in itertools.pairwise(names)), names  # merged
    return out


def assert_tiles_the_audio(seq: list[tuple[str, float, float]], audio: np.ndarray) -> None:
    offsets = [o for _, o, _ in seq]
    assert all(a < b for a, b in itertools.pairwise(offsets))
    assert offsets[0] == 0.0
    total = sum(d for _, _, d in seq)
    # Exact but for the wire's rounding to a microsecond, a viseme at a time.
    assert total == pytest.approx(len(audio) / RATE * 1000, abs=1e-3 * len(seq))


def merged(seq: list[tuple[str, float, float]]) -> list[tuple[str, float, float]]:
    """Shapes cut at chunk edges joined again."""
    out: list[tuple[str, float, float]] = []
    for name, offset, duration in seq:
        if out and out[-1][0] == name:
            out[-1] = (name, out[-1][1], out[-1][2] + duration)
        else:
            out.append((name, offset, duration))
    return out


def test_off_by_default_and_the_audio_is_the_same(daemon: Daemon) -> None:
    text = "The map is on the table."
    with Client(daemon.socket) as c:
        plain = [e for e in c.synthesize(text, **ZERO) if e["event"] == "chunk"]
        info = c.info()
    assert all("visemes" not in e for e in plain)
    assert info["visemes"] == list(VISEMES)  # the capability, and the numbers' names
    audio, chunks = run(daemon, text)
    assert audio.tobytes() == b"".join(e["audio"] for e in plain)
    assert all("words" not in e for e in chunks)  # visemes alone: no word timings


def test_a_known_word_has_its_shapes(daemon: Daemon) -> None:
    audio, chunks = run(daemon, "Map.")
    seq = merged(shapes(chunks))
    assert_tiles_the_audio(seq, audio)
    names = [n for n, _, _ in seq]
    assert names[0] == names[-1] == "sil"
    assert names[1:-1] == ["PP", "aa", "PP"], names  # m æ p


@pytest.mark.parametrize("speed", [1.0, 2.0])
def test_visemes_tile_the_audio_and_follow_the_speed(daemon: Daemon, speed: float) -> None:
    audio, chunks = run(daemon, LONG, speed=speed)
    seq = shapes(chunks)
    assert_tiles_the_audio(seq, audio)
    sounding = [d for n, _, d in seq if n != "sil"]
    assert len(sounding) > 60 and sum(sounding) > 0.5 * len(audio) / RATE * 1000
    if speed == 2.0:
        _, slow = run(daemon, LONG)
        slow_ms = sum(d for n, _, d in shapes(slow) if n != "sil")
        assert sum(sounding) == pytest.approx(slow_ms / 2, rel=0.15)


def longest_quiet_ms(audio: np.ndarray) -> tuple[float, float]:
    """The longest run of near-silent samples: (start, length) in ms."""
    edges = np.diff(np.concatenate([[0], (np.abs(audio) < 1e-3).astype(np.int8), [0]]))
    starts, ends = np.nonzero(edges == 1)[0], np.nonzero(edges == -1)[0]
    k = int(np.argmax(ends - starts))
    return starts[k] / RATE * 1000, (ends[k] - starts[k]) / RATE * 1000


def test_a_break_is_silence(daemon: Daemon) -> None:
    text = '<speak>Pick up the map <break time="500ms"/> and go home.</speak>'
    audio, chunks = run(daemon, text, text_format="ssml")
    seq = merged(shapes(chunks))
    assert_tiles_the_audio(seq, audio)
    quiet_at, quiet_ms = longest_quiet_ms(audio)
    assert quiet_ms > 400
    # A sil lies over the break's silence, to a couple of frames at each side.
    over = [(o, d) for n, o, d in seq if n == "sil" and d >= 500]
    assert len(over) == 1, seq
    o, d = over[0]
    assert o <= quiet_at + 2 * FRAME_MS and quiet_at + quiet_ms <= o + d + 2 * FRAME_MS


def test_clauses_and_sentences_pause_in_sil(daemon: Daemon) -> None:
    text = "First, a short one. Then a second sentence; and a clause after it."
    audio, chunks = run(daemon, text)
    seq = merged(shapes(chunks))
    assert_tiles_the_audio(seq, audio)
    long_sils = [d for n, _, d in seq if n == "sil" and d > 100]
    assert len(long_sils) >= 3  # comma, full stop, semicolon (and the ends)


async def _eager(sock: str, text: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """``text`` written a word every 50 ms into an eager text stream, visemes and words on."""
    chunks: list[dict[str, Any]] = []
    end: dict[str, Any] = {}
    async with await AsyncClient.connect(sock) as ac:
        stream = await ac.text_stream(text_start="eager", visemes=True, word_timings=True, **ZERO)

        async def feed() -> None:
            for word in text.split(" "):
                await stream.append(word + " ")
                await asyncio.sleep(0.05)
            await stream.finish()

        task = asyncio.create_task(feed())
        async for ev in stream:
            if ev["event"] == "chunk":
                chunks.append(ev)
            else:
                end = ev
        await task
    return chunks, end


def test_an_eager_starts_joins_carry_visemes_where_the_words_are(daemon: Daemon) -> None:
    chunks, end = asyncio.run(_eager(daemon.socket, LONG))
    assert end["event"] == "end" and end["stats"]["eager_sentences"] >= 1, end
    audio = np.concatenate([np.frombuffer(e["audio"], dtype="<f4") for e in chunks])
    seq = shapes(chunks)
    assert_tiles_the_audio(seq, audio)
    words = [w for c in chunks for w in c["words"]]
    assert len(words) == len(LONG.split())
    for name, offset, duration in seq:  # a sounding shape lies in a word, to a frame
        mid = offset + duration / 2
        assert name == "sil" or any(
            w["offset_ms"] - FRAME_MS <= mid <= w["offset_ms"] + w["duration_ms"] + FRAME_MS
            for w in words
        ), (name, offset)


def test_paced_frames_carry_the_visemes_of_their_span(daemon: Daemon) -> None:
    _, frames = run(daemon, "Map the road.", pace_ms=20)
    seq = shapes(frames)  # each 20 ms frame tiled
    assert all(f["duration_ms"] == 20 for f in frames)
    assert sum(d for _, _, d in seq) == pytest.approx(20 * len(frames), abs=1e-3 * len(seq))
    assert [n for n, _, _ in merged(seq)][:4] == ["sil", "PP", "aa", "PP"]


def test_the_field_on_the_wire() -> None:
    """Off unless asked, on synthesize and speak (which reports ``viseme`` events as they
    are played, tests/playback/test_speak_visemes.py); a chunk's visemes go as three
    parallel arrays."""
    d = {"op": "synthesize", "id": 1, "text": "Map."}
    assert SynthesizeRequest.from_dict(d).speech().visemes is False
    req = SynthesizeRequest.from_dict({**d, "visemes": True})
    assert req.speech().visemes is True and req.to_dict()["visemes"] is True
    speak = SynthesizeRequest.from_dict({**d, "op": "speak", "visemes": True}, op="speak")
    assert speak.speech().visemes is True
    with pytest.raises(ProtocolError, match="visemes"):
        SynthesizeRequest.from_dict({**d, "visemes": "yes"})
    event = ChunkEvent(
        1, 0, b"", 0.0, 30.0, (0, 4), True, visemes=(Viseme(0, 0.0, 10.0), Viseme(1, 10.0, 20.0))
    )
    assert event.to_dict()["visemes"] == {
        "viseme": [0, 1],
        "offset_ms": [0.0, 10.0],
        "duration_ms": [10.0, 20.0],
    }
    assert "visemes" not in ChunkEvent(1, 0, b"", 0.0, 30.0, (0, 4), True).to_dict()
