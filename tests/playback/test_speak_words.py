"""``speak`` with ``word_timings`` on a PulseAudio null sink: ``word`` events as the words
are played, and ``end.heard`` — what the listener heard before a ``stop`` or a newer
message cut it."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.conftest import Daemon
from tests.wire import Wire

# Words are checked against the device's clock (within SLACK_MS): beside the other test
# process the sink fell behind and the checks failed now and then; alone, as solo tests run.
pytestmark = pytest.mark.solo

TEXT = (
    "Several engineers reviewed the bridge design during a long meeting yesterday, and "
    "then they walked along the river to look at the old stone piers once more."
)
ZERO = {"noise_scale": 0, "noise_w": 0}
SLACK_MS = 120.0
"""The sink's latency, the poll and the socket between the daemon's clock and ours."""


def timings(w: Wire) -> list[dict[str, Any]]:
    w.send({"op": "synthesize", "id": 100, "text": TEXT, "word_timings": True, **ZERO})
    return [wd for e in w.until(100) if e["event"] == "chunk" for wd in e["words"]]


def test_words_are_reported_as_played_and_heard_stops_at_the_stop(
    speaker_daemon: Daemon,
) -> None:
    with Wire(speaker_daemon.socket) as w:
        words = timings(w)
        w.send({"op": "speak", "id": 1, "text": TEXT, "word_timings": True, **ZERO})
        got = w.until(1, ("started",))
        t_started = time.monotonic()
        assert got[-1]["event"] == "started", got
        reported: list[tuple[list[int], float]] = []
        while time.monotonic() - t_started < 1.0:
            try:
                ev = w.recv(timeout=0.05)
            except TimeoutError:
                continue
            assert ev is not None and ev["id"] == 1 and ev["event"] == "word", ev
            reported.append((ev["text_span"], (time.monotonic() - t_started) * 1000))
        t_stop = (time.monotonic() - t_started) * 1000
        assert w.call({"op": "stop", "id": 2})["event"] == "ok"
        rest = w.until(1)
    end = rest[-1]
    assert end["event"] == "end" and end["cancelled"] is True, end
    reported += [(e["text_span"], t_stop) for e in rest if e["event"] == "word"]
    spans = [wd["text_span"] for wd in words]
    # Reported in order, the words' own spans, each once its sound started.
    assert [s for s, _ in reported] == spans[: len(reported)]
    for (_, at_ms), wd in zip(reported, words, strict=False):
        assert at_ms + SLACK_MS >= wd["offset_ms"], (at_ms, wd)
    # heard: from the first word to the end of the last word played whole by the stop.
    a, b = end["heard"]
    assert a == spans[0][0]
    done = [wd for wd in words if wd["text_span"][1] <= b]
    assert done and done[-1]["text_span"][1] == b
    assert done[-1]["offset_ms"] + done[-1]["duration_ms"] <= t_stop + SLACK_MS
    following = words[len(done)]
    assert following["offset_ms"] + following["duration_ms"] > t_stop - SLACK_MS - 60
    assert b < len(TEXT)  # about a second of a ~8 s text: only its first words


def test_heard_is_everything_when_it_plays_out_and_absent_without_word_timings(
    speaker_daemon: Daemon,
) -> None:
    with Wire(speaker_daemon.socket) as w:
        w.send({"op": "speak", "id": 1, "text": "Close the door.", "word_timings": True, **ZERO})
        evs = w.until(1)
        w.send({"op": "speak", "id": 2, "text": "Close the door.", **ZERO})
        plain = w.until(2)
    assert [e["event"] for e in evs] == ["queued", "started", "word", "word", "word", "end"]
    assert evs[-1]["heard"] == [0, len("Close the door.")]
    assert [e["event"] for e in plain] == ["queued", "started", "end"]
    assert "heard" not in plain[-1]


def test_heard_after_a_newer_message_cuts_it(speaker_daemon: Daemon) -> None:
    with Wire(speaker_daemon.socket) as w:
        w.send({"op": "speak", "id": 1, "text": TEXT, "priority": "text", "word_timings": True})
        w.until(1, ("started",))
        # The second word's sound has started, so the first was played whole: a fixed
        # sleep left too little margin where the first chunk came late (a slow box).
        w.until(1, ("word",))
        w.until(1, ("word",))
        w.send({"op": "speak", "id": 2, "text": "Important news.", "priority": "message"})
        end = w.until(1)[-1]
        w.until(2)
    assert end["event"] == "end" and end["interrupted"] is True, end
    a, b = end["heard"]
    assert a == 0 and 0 < b < len(TEXT)
