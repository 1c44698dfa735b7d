"""Barge-in on protocol v1: a cancelled request's ``end`` says how far in the text the
audio it sent reaches (``sent_text_span``), so an agent can cut its context to what the
listener could have heard; nothing made after the cancel goes out."""

from __future__ import annotations

import time

from tests.conftest import Daemon
from tests.wire import Wire

LONG = (
    "The committee met on a cold and windy morning to review the proposal for the new "
    "library building. It would replace the old reading room that had served the town "
    "for more than sixty years. Everyone agreed that the new building should have more "
    "light, more seats and a quiet corner for children who want to read on their own."
)


def _cancel_after(w: Wire, rid: int, chunks: int, **fields: object) -> tuple[list, dict, float]:
    """``chunks`` chunks of request ``rid``, then a cancel: (every chunk, the end, the
    audio in ms that came after the cancel was sent)."""
    w.send({"op": "synthesize", "id": rid, "text": LONG, "format": "s16le", **fields})
    got: list[dict] = []
    after_ms = 0.0
    cancelled_at = None
    while True:
        ev = w.recv(timeout=60)
        assert ev is not None
        if ev.get("id") != rid:
            continue
        if ev["event"] == "chunk":
            got.append(ev)
            if cancelled_at is not None:
                after_ms += ev["duration_ms"]
            elif len(got) == chunks:
                w.send({"op": "cancel", "id": rid + 1000, "target": rid})
                cancelled_at = time.monotonic()
        elif ev["event"] in ("end", "error"):
            return got, ev, after_ms


def test_a_cancelled_request_says_how_far_its_audio_reaches(daemon: Daemon) -> None:
    with Wire(daemon.socket) as w:
        chunks, end, _ = _cancel_after(w, 1, 2, word_timings=True)
        assert end["event"] == "end" and end["cancelled"] is True, end
        words = [tuple(word["text_span"]) for c in chunks for word in c.get("words", [])]
        assert words, "word timings were asked for"
        # To the end of the last word whose sound started in what was sent: mid-text.
        assert end["sent_text_span"] == [words[0][0], words[-1][1]], (end, words)
        assert 0 < end["sent_text_span"][1] < len(LONG)
        assert LONG[end["sent_text_span"][1] - 1].isalnum()  # a word's end

        # Without word timings: the clauses chunks were sent from.
        chunks, end, _ = _cancel_after(w, 2, 1)
        assert end["cancelled"] is True
        assert end["sent_text_span"] == [chunks[0]["text_span"][0], chunks[-1]["text_span"][1]]

        # A request that was not cancelled says nothing of it.
        w.send({"op": "synthesize", "id": 3, "text": "Short."})
        done = w.until(3)[-1]
        assert done["event"] == "end" and "sent_text_span" not in done
