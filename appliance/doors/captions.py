"""Captions from word timings: cues, WebVTT, SRT, and Kokoro-FastAPI's timestamps.

A reply's words (:class:`~appliance.speech.Word`, from chunks made with ``word_timings``)
become cues: one per sentence (a chunk with ``sentence_end`` closes one), or at most
``max_words`` words each when that is set.  A cue runs from its first word's start to its
last word's end; its text is its words as written in the source, joined by spaces (SSML
markup between words is not in it), with a Markdown or SSML source's character references
read (``&amp;`` is ``&``; plain text keeps them as written).  WebVTT escapes the text once,
from that (``&``, ``<``, ``>``); SRT has no escapes, so a run of hyphens before ``>`` is cut
to one (its time separator ``-->`` cannot appear in a cue).

Bounds: a whole reply's words are held (the text is capped by ``limits.max_text_chars``);
nothing outlives one reply.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from appliance.speech import Viseme, Word

CAPTION_FORMATS = ("vtt", "srt")
MARKUP_FORMATS = ("markdown", "ssml")
"""Text formats whose character references stand for a character (``&amp;``)."""

_ARROW = re.compile(r"-{2,}>")


@dataclass(frozen=True)
class Cue:
    start_ms: float
    end_ms: float
    text: str


class CueBuilder:
    """Collects a reply's words chunk by chunk and cuts them into cues."""

    def __init__(self, text: str, max_words: int = 0, text_format: str = "text") -> None:
        """``text``: the request's text as sent (the words' spans index it);
        ``max_words``: at most this many words a cue (0: one cue per sentence);
        ``text_format``: how ``text`` is read (Markdown and SSML: references are read)."""
        self.text = text
        self.markup = text_format in MARKUP_FORMATS
        self.max_words = max(0, max_words)
        self.words: list[Word] = []
        self.cues: list[Cue] = []
        self._open: list[Word] = []

    def add(self, words: Sequence[Word], sentence_end: bool) -> None:
        """One chunk's words; ``sentence_end``: the chunk ends a sentence."""
        for w in words:
            self.words.append(w)
            self._open.append(w)
            if self.max_words and len(self._open) >= self.max_words:
                self._close()
        if sentence_end:
            self._close()

    def finish(self) -> list[Cue]:
        self._close()
        return self.cues

    def _close(self) -> None:
        if not self._open:
            return
        first, last = self._open[0], self._open[-1]
        text = " ".join(self.text[a:b] for a, b in (w.text_span for w in self._open))
        if self.markup:
            text = html.unescape(text)
        self.cues.append(Cue(first.offset_ms, last.offset_ms + last.duration_ms, text))
        self._open = []


def _clock(ms: float, sep: str) -> str:
    total = max(0, round(ms))
    h, rest = divmod(total, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, milli = divmod(rest, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{milli:03d}"


def _one_line(text: str) -> str:
    # A blank line ends a cue in both formats.
    return " ".join(text.split())


def webvtt(cues: Sequence[Cue]) -> str:
    lines = ["WEBVTT", ""]
    for cue in cues:
        # Escaped once, "&" first: "-->" becomes "--&gt;", shown as written.
        text = _one_line(cue.text).replace("&", "&amp;").replace("<", "&lt;")
        text = text.replace(">", "&gt;")
        lines += [f"{_clock(cue.start_ms, '.')} --> {_clock(cue.end_ms, '.')}", text, ""]
    return "\n".join(lines)


def srt(cues: Sequence[Cue]) -> str:
    lines: list[str] = []
    for k, cue in enumerate(cues, 1):
        span = f"{_clock(cue.start_ms, ',')} --> {_clock(cue.end_ms, ',')}"
        # No escapes in SRT: "x--->y" is "x->y" (one pass leaves no "-->" behind).
        lines += [str(k), span, _ARROW.sub("->", _one_line(cue.text)), ""]
    return "\n".join(lines)


def render(fmt: str, cues: Sequence[Cue]) -> str:
    """``vtt`` or ``srt``."""
    return webvtt(cues) if fmt == "vtt" else srt(cues)


def visemes_dict(visemes: Sequence[Viseme]) -> dict[str, list[Any]]:
    """Visemes on the wire (v1's chunks, HTTP's events), as parallel arrays: ``viseme``
    (the number in ``info.visemes``), ``offset_ms`` (from the request's start) and
    ``duration_ms``.  In msgpack ~19 bytes a viseme, where a map each took ~45."""
    return {
        "viseme": [v.viseme for v in visemes],
        "offset_ms": [round(v.offset_ms, 3) for v in visemes],
        "duration_ms": [round(v.duration_ms, 3) for v in visemes],
    }


def kokoro_timestamps(words: Sequence[Word], text: str) -> list[dict[str, Any]]:
    """Kokoro-FastAPI's captioned-speech timestamps (seconds), plus ttsd's ``text_span``."""
    return [
        {
            "word": text[w.text_span[0] : w.text_span[1]],
            "start_time": round(w.offset_ms / 1000, 4),
            "end_time": round((w.offset_ms + w.duration_ms) / 1000, 4),
            "text_span": list(w.text_span),
        }
        for w in words
    ]
