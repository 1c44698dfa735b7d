"""What piper's CLI does to the audio after its model, done by ttsctl on a request's events.

piper (``piper -m VOICE -f out.wav``) scales each sentence's audio so that its peak is full
scale (unless ``--no-normalize``), then multiplies it by ``--volume`` and clips, and puts
``--sentence-silence`` seconds of silence between sentences.  ttsd sends the model's audio
as it is, so by default it equals ``piper --no-normalize`` (noise off); :class:`PiperStyle`
gives the rest, from the events of one ``synthesize`` request in ``f32le``:

- ``normalize``: each sentence (the chunks up to one with ``sentence_end``) divided by its
  peak, exactly as piper-tts's ``PiperVoice.synthesize`` does.  It needs the whole sentence:
  a sentence's chunks are held until its last one has come, so the first sound waits for
  the first sentence.  The daemon clips its output to full scale, so a sentence whose model
  output goes past it (rare) is normalised from the clipped peak.
- ``volume``: applied after normalising (with ``normalize`` only: without, the daemon
  applies the request's ``volume`` and this is 1).
- ``silence_s``: silence between sentences, as chunks of their own (``text_span`` empty at
  the sentence's end), later chunks' ``offset_ms`` and word timings moved by it.

piper reads an input file (``-i``) line by line, each line a text of its own;
:func:`each_line` does the same with one request a line, as one request's events.

Bounds: holds at most one sentence's chunks (the daemon cuts a sentence at
``streaming.max_sentence_chars``).  One object per request.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from appliance.speech import FloatArray

Event = dict[str, Any]

SUMMED_STATS = ("audio_ms", "chunks", "compute_ms", "stalls")
"""``end.stats`` that add up over :func:`each_line`'s requests (the rest: the first's)."""

PEAK_FLOOR = 1e-8
"""piper-tts: a sentence quieter than this is written as silence (no division by ~0)."""


def normalized(audio: FloatArray, volume: float = 1.0) -> FloatArray:
    """piper-tts's ``normalize_audio`` and ``volume`` on one sentence's float samples."""
    peak = float(np.max(np.abs(audio))) if audio.size else 0.0
    out = np.zeros_like(audio) if peak < PEAK_FLOOR else audio / np.float32(peak)
    if volume != 1.0:
        out = out * np.float32(volume)
    result: FloatArray = np.clip(out, -1.0, 1.0).astype(np.float32)
    return result


@dataclass
class PiperStyle:
    normalize: bool = False
    volume: float = 1.0
    silence_s: float = 0.0
    _held: list[Event] = field(default_factory=list)
    _silence: int = 0
    _rate: int = 0
    _moved_ms: float = 0.0
    _after_sentence: bool = False

    def shape(self, events: Iterable[Event]) -> Iterator[Event]:
        for ev in events:
            yield from self.feed(ev)

    def feed(self, ev: Event) -> list[Event]:
        """The events to pass on for ``ev`` (none while a sentence is held)."""
        kind = ev.get("event")
        if kind == "start":
            self._rate = int(ev["sample_rate"])
            # piper: int(sample_rate * seconds) samples.
            self._silence = int(self._rate * self.silence_s)
            return [ev]
        if kind != "chunk":
            return [*self._release(), ev]
        out: list[Event] = []
        if self._after_sentence and self._silence:
            out.append(self._silence_chunk(ev))
        self._after_sentence = bool(ev.get("sentence_end"))
        moved = self._moved(ev)
        if not self.normalize:
            return [*out, moved]
        self._held.append(moved)
        if self._after_sentence:
            out.extend(self._release())
        return out

    def _release(self) -> list[Event]:
        """The held sentence, normalised by its own peak, chunk by chunk as it came."""
        if not self._held:
            return []
        held, self._held = self._held, []
        parts = [np.frombuffer(ev["audio"], dtype="<f4") for ev in held]
        audio = normalized(np.concatenate(parts), self.volume)
        out, at = [], 0
        for ev, part in zip(held, parts, strict=True):
            out.append({**ev, "audio": audio[at : at + part.size].tobytes()})
            at += part.size
        return out

    def _silence_chunk(self, following: Event) -> Event:
        ms = 1000.0 * self._silence / self._rate
        at = int(following.get("text_span", (0, 0))[0])
        chunk = {
            "event": "chunk",
            "audio": bytes(4 * self._silence),
            "offset_ms": float(following.get("offset_ms", 0.0)) + self._moved_ms,
            "duration_ms": ms,
            "text_span": [at, at],
            "sentence_end": False,
        }
        self._moved_ms += ms
        return chunk

    def _moved(self, ev: Event) -> Event:
        """``ev`` with its times after the silence put in before it."""
        if not self._moved_ms:
            return ev
        out = {**ev, "offset_ms": float(ev.get("offset_ms", 0.0)) + self._moved_ms}
        if ev.get("words"):
            out["words"] = [
                {**w, "offset_ms": float(w["offset_ms"]) + self._moved_ms} for w in ev["words"]
            ]
        return out


def each_line(text: str, synthesize: Callable[[str], Iterable[Event]]) -> Iterator[Event]:
    """piper's ``--input-file``: each non-blank line of ``text`` (stripped) is a request of
    its own, one after the other, and the whole is one request's events: one ``start``,
    the chunks with their times and ``text_span`` moved to their place in ``text`` (so
    captions cue the whole), one ``end`` (:data:`SUMMED_STATS` summed)."""
    started, done_ms, pos = False, 0.0, 0
    stats: dict[str, Any] = {}
    for line in text.splitlines(keepends=True):
        lead, pos = pos + len(line) - len(line.lstrip()), pos + len(line)
        if not line.strip():
            continue
        line_ms = 0.0
        for ev in synthesize(line.strip()):
            kind = ev.get("event")
            if kind == "start" and not started:
                started = True
                yield ev
            elif kind == "chunk":
                line_ms += float(ev.get("duration_ms", 0.0))
                yield _placed(ev, lead, done_ms)
            elif kind == "end":
                got = dict(ev.get("stats") or {})
                for key in SUMMED_STATS:
                    if key in got:
                        got[key] = stats.get(key, 0) + got[key]
                stats = {**got, **{k: v for k, v in stats.items() if k not in SUMMED_STATS}}
                if ev.get("cancelled"):
                    yield {**ev, "stats": stats}
                    return
        done_ms += line_ms
    yield {"event": "end", "cancelled": False, "stats": stats}


def _placed(ev: Event, chars: int, ms: float) -> Event:
    """A chunk of one line's request, at its place in the whole text and audio."""

    def span(s: Any) -> list[int]:
        return [int(s[0]) + chars, int(s[1]) + chars]

    out = {**ev, "offset_ms": float(ev.get("offset_ms", 0.0)) + ms}
    out["text_span"] = span(ev.get("text_span", (0, 0)))
    if ev.get("words"):
        out["words"] = [
            {**w, "text_span": span(w["text_span"]), "offset_ms": float(w["offset_ms"]) + ms}
            for w in ev["words"]
        ]
    return out
