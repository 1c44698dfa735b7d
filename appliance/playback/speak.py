"""One utterance on the device, fed by a stream of chunks: what ``speak`` does with audio.

:class:`Speech` is the consumer a ``speak`` request's stream writes into: each chunk is
pushed into the player's :class:`~appliance.playback.utterance.Utterance`; ``started``
is reported when the device is handed the first sample, and each SSML mark when it is
handed the mark's sample (polled every 5 ms from the event loop: the audio thread must
not call into the loop on every callback).  It knows nothing of the core: the producer
(the stream's job) is handed in.

With word timings each chunk's words are reported the same way (``on_word(text_span)``
when the word's first sample is handed to the device), with visemes each mouth shape
(``on_viseme(viseme)`` when its first sample is), and :meth:`Speech.heard` says which
span of the text was fully played when the utterance ended (a ``stop``, ``cancel`` or a
newer message cut it, or it played out).

Bounds: marks, words and visemes wait in deques as long as the request's own (capped)
text has marks, words and phonemes; the tasks it starts end with the utterance.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from appliance.playback.utterance import EndInfo, Utterance
from appliance.speech import Chunk, Viseme, Word

MARK_POLL_S = 0.005
"""How often the device's progress is looked at for a mark (well under a word)."""

Emit = Callable[[Chunk], Awaitable[None]]


def heard_span(words: Sequence[Word], played_ms: float, slack_ms: float = 2.0) -> tuple[int, int]:
    """The text fully played when ``played_ms`` of the audio was: from the first word's
    start to the end of the last word whose sound ended by then (empty at the first word
    when none did; (0, 0) with no words)."""
    if not words:
        return (0, 0)
    start = words[0].text_span[0]
    end = start
    for w in words:
        if w.offset_ms + w.duration_ms > played_ms + slack_ms:
            break
        end = w.text_span[1]
    return (start, end)


@dataclass(eq=False)
class Speech:
    """A ``speak`` request's audio on its way to the device (see the module)."""

    utterance: Utterance
    on_started: Callable[[float], None]
    on_mark: Callable[[str], None] | None
    waited_ms: float
    """How long the request waited before its utterance was made (the player counts its
    latency from there; ``started`` reports it from the request)."""
    on_word: Callable[[tuple[int, int]], None] | None = None
    on_viseme: Callable[[Viseme], None] | None = None
    _cues: collections.deque[tuple[float, Callable[[], None]]] = field(
        default_factory=collections.deque, init=False
    )
    """Marks, words and visemes to report: (offset ms, report), in order of the audio."""
    _marks_changed: asyncio.Event = field(default_factory=asyncio.Event, init=False)
    words: list[Word] = field(default_factory=list, init=False)
    """Every word pushed so far (``heard`` reads them)."""

    async def emit(self, chunk: Chunk) -> None:
        """The stream's emit: the chunk to the device, its marks to be reported."""
        if not self.utterance.push(chunk.samples):
            # Cut, dropped or stopped: no one will hear the rest, so stop making it.
            raise asyncio.CancelledError()
        cues: list[tuple[float, Callable[[], None]]] = []
        if chunk.marks and self.on_mark is not None:
            on_mark = self.on_mark
            cues += [(m.offset_ms, functools.partial(on_mark, m.name)) for m in chunk.marks]
        if chunk.words:
            self.words.extend(chunk.words)
            if self.on_word is not None:
                on_word = self.on_word
                cues += [
                    (w.offset_ms, functools.partial(on_word, w.text_span)) for w in chunk.words
                ]
        if chunk.visemes and self.on_viseme is not None:
            on_viseme = self.on_viseme
            cues += [(v.offset_ms, functools.partial(on_viseme, v)) for v in chunk.visemes]
        if cues:
            cues.sort(key=lambda c: c[0])  # stable: a mark before the word it precedes
            self._cues.extend(cues)
            self._marks_changed.set()

    def heard(self) -> tuple[int, int]:
        """The span of the text whose words were fully played (see wordtimes.heard_span)."""
        utt = self.utterance
        played_ms = 1000.0 * utt.frames_played / utt.out_rate
        return heard_span(self.words, played_ms)

    async def play(self, produce: Callable[[Emit], Awaitable[None]]) -> EndInfo:
        """Run ``produce(self.emit)``, then wait for the device to end the utterance; what
        happened to it (played out, cut, dropped, device lost)."""
        utt = self.utterance
        started = asyncio.create_task(self._relay_started())
        cued = any(f is not None for f in (self.on_mark, self.on_word, self.on_viseme))
        marks = asyncio.create_task(self._relay_marks(started)) if cued else None
        try:
            try:
                await produce(self.emit)
            finally:
                utt.finish()
            info = await utt.wait_ended()
            if marks is not None:
                # Marks on the last samples: the device has them now.
                with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                    await asyncio.wait_for(asyncio.shield(marks), timeout=0.2)
            # Let 'started' go out first when it happened.
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(asyncio.shield(started), timeout=0.5)
            return info
        finally:
            started.cancel()
            if marks is not None:
                marks.cancel()

    async def _relay_started(self) -> None:
        latency = await self.utterance.wait_started()
        if latency is not None:
            self.on_started(latency + self.waited_ms)

    async def _relay_marks(self, started: asyncio.Task[None]) -> None:
        utt = self.utterance
        await asyncio.shield(started)  # 'started' goes out first
        if utt.latency_ms is None and utt.end_info is not None:
            return  # never started: nothing was heard
        while True:
            while not self._cues:
                self._marks_changed.clear()
                await self._marks_changed.wait()
            offset_ms, report = self._cues[0]
            # (2 ms early: the resampler may hand over a few frames fewer at the end)
            target = max(0.0, offset_ms - 2.0) * utt.out_rate / 1000.0
            while utt.frames_played < target:
                if utt.end_info is not None:
                    return  # ended before that sample was played: not heard
                await asyncio.sleep(MARK_POLL_S)
            self._cues.popleft()
            report()
