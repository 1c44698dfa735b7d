"""A request's text made into clauses, off the loop: the text side of the service core.

- A one-shot text: its head's clauses now, the rest prepared in the same executor while
  the head is spoken and appended to the queue (:mod:`appliance.core.headfirst`); a
  failure there ends the request with its one error through ``fail``.
- A text stream: a :class:`~appliance.core.textstream.TextFeed` that prepares each
  segment as it is released; Markdown pauses add up over the whole request to one cap.
- ``phonemes``' report, with the same frontend.

Bounds: the frontend runs in this object's own executor of :data:`FRONTEND_THREADS`
threads (a long text never holds up the inference workers, nor two texts at once every
other request's); every text is bounded by the runtime's frontend limits.  Lifecycle: one
per :class:`~appliance.core.service.Service`; :meth:`close` stops its executor.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from appliance.core.headfirst import prepare_head, prepare_tail
from appliance.core.runtime import Runtime
from appliance.core.streaming import ClauseQueue, VoiceRuntime
from appliance.core.textstream import TextFeed
from appliance.errors import ErrorCode, ServiceError
from appliance.speech import SpeechRequest
from appliance.text.cuts.stream import SegmentRule
from appliance.text.frontend import Clause, FrontendLimits, prepare
from appliance.text.markdown import MarkdownOptions

log = logging.getLogger(__name__)

FRONTEND_THREADS = 2
"""Text normalisation is a few ms of pure Python per request: two threads keep one long
text from holding up everyone else's, without competing with the inference workers."""


@dataclass
class Prepared:
    """A request's clauses as they come: the queue the job reads, and what fills it later
    (a text stream's feed, or a one-shot text's rest being prepared)."""

    queue: ClauseQueue
    feed: TextFeed | None = None
    tail: asyncio.Task[None] | None = None


class TextPrep:
    """The frontend on the service's executor (see the module)."""

    def __init__(self, runtime: Callable[[], Runtime]) -> None:
        self._runtime = runtime
        """The runtime served from now (a reload swaps the service's whole)."""
        self.pool = ThreadPoolExecutor(FRONTEND_THREADS, "frontend")
        self.frontend: Callable[..., list[Clause]] = prepare
        """The text frontend (a test's daemon may put another in: appliance.daemon.Seams)."""

    @property
    def runtime(self) -> Runtime:
        return self._runtime()

    async def clauses(
        self,
        req: SpeechRequest,
        voice: VoiceRuntime,
        fail: Callable[[ServiceError], None],
        audio_left: Callable[[], float | None],
    ) -> Prepared:
        """``req``'s clauses: ServiceError when its head cannot be prepared; a failure later
        goes to ``fail``."""
        limits = self.runtime.frontend_limits()
        if not req.text_stream:
            return await self._head_first(req, voice, limits, fail)
        queue = ClauseQueue(closed=False)
        feed = TextFeed(
            queue,
            _Segments(self, req, voice.language, limits).prepare,
            self._segment_rule(),
            limits.max_chars,
            self.runtime.config.streaming.text_timeout_s,
            fail,
            audio_left=audio_left,
            eager=req.text_start == "eager",
            markdown=req.text_format == "markdown",
        )
        if req.text:
            feed.append(req.text)
        return Prepared(queue, feed=feed)

    def _segment_rule(self) -> SegmentRule:
        s = self.runtime.config.streaming
        return SegmentRule(
            s.text_first_chars, s.text_max_chars, s.text_idle_ms, s.text_low_water_ms
        )

    async def _head_first(
        self,
        req: SpeechRequest,
        voice: VoiceRuntime,
        limits: FrontendLimits,
        fail: Callable[[ServiceError], None],
    ) -> Prepared:
        """A one-shot text's clauses: its head's now, the rest appended once prepared (in
        the executor, while the head is spoken: appliance.core.headfirst)."""
        options = self._options(req.text_format)
        head, cut = await asyncio.get_running_loop().run_in_executor(
            self.pool,
            functools.partial(
                prepare_head, self.frontend, req.text, voice.language, limits, **options
            ),
        )
        check_ipa(voice, head)  # before any audio
        if cut >= len(req.text):
            return Prepared(ClauseQueue(head, closed=True))
        queue = ClauseQueue(head, closed=False)
        work = functools.partial(
            prepare_tail, self.frontend, req.text, cut, voice.language, limits, **options
        )
        tail = asyncio.create_task(self._tail(work, voice, queue, fail))
        return Prepared(queue, tail=tail)

    async def _tail(
        self,
        work: Callable[[], list[Clause]],
        voice: VoiceRuntime,
        queue: ClauseQueue,
        fail: Callable[[ServiceError], None],
    ) -> None:
        """The rest of a one-shot text: its clauses appended and the queue closed; a failure
        ends the request with its one error, as a text stream's segment does."""
        try:
            clauses = await asyncio.get_running_loop().run_in_executor(self.pool, work)
            check_ipa(voice, clauses)
        except ServiceError as exc:
            queue.close()
            fail(exc)
            return
        except Exception as exc:  # a bug in the frontend: this request ends, not silently
            log.exception("the frontend failed on the rest of a text")
            queue.close()
            fail(ServiceError(ErrorCode.INTERNAL, type(exc).__name__))
            return
        queue.put(clauses)
        queue.close()

    def _options(self, text_format: str, paused_ms: int = 0) -> dict[str, Any]:
        """The frontend's keyword options for a request's text (``paused_ms``: Markdown
        pauses its earlier text was given)."""
        return {
            "text_format": text_format,
            "lexicon": self.runtime.lexicon,
            "markdown_options": self.markdown_options(paused_ms),
        }

    async def prepare_text(
        self,
        text: str,
        language: str,
        limits: FrontendLimits,
        text_format: str = "text",
        paused_ms: int = 0,
    ) -> list[Clause]:
        work: Callable[[], list[Clause]] = functools.partial(
            self.frontend, text, language, limits, **self._options(text_format, paused_ms)
        )
        return await asyncio.get_running_loop().run_in_executor(self.pool, work)

    def markdown_options(self, paused_ms: int = 0) -> MarkdownOptions:
        """How ``text_format: markdown`` is read, from the config's ``markdown:``."""
        m = self.runtime.config.markdown
        return MarkdownOptions(
            m.code_blocks, m.code_phrase, m.heading_pause_ms, m.rule_pause_ms, paused_ms=paused_ms
        )

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)


class _Segments:
    """A text stream's segments prepared one by one: the first under the request's limits,
    the later ones too; Markdown's pauses so far carried over, so the request's add up to
    one cap, not each segment's."""

    def __init__(
        self, prep: TextPrep, req: SpeechRequest, language: str, limits: FrontendLimits
    ) -> None:
        self.prep = prep
        self.req = req
        self.language = language
        self.first = limits
        self.later = FrontendLimits(limits.max_chars, limits.sentence_chars)
        self.paused_ms = 0

    async def prepare(self, text: str, first: bool) -> list[Clause]:
        limits = self.first if first else self.later
        clauses = await self.prep.prepare_text(
            text, self.language, limits, self.req.text_format, self.paused_ms
        )
        self.paused_ms += sum(clause.pause_after_ms for clause in clauses)
        return clauses


def check_ipa(voice: VoiceRuntime, clauses: list[Clause]) -> None:
    """<phoneme> and lexicon IPA against the voice's symbols (ServiceError)."""
    ph = voice.phonemizer
    for c in clauses:
        for o in c.phonemes:
            ph.ipa(o.ipa)
