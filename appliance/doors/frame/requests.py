"""A connection's requests: each with its stream, the text held before the stream opens,
its cancel, and its one ending (:func:`~appliance.doors.frame.ending.settle`).

A request is registered when its message is accepted and leaves the registry when its
ending has been told (or, for a ``speak`` that plays on, when its door takes it over:
:meth:`Requests.release`).  Its body runs as a task of its own (:meth:`Requests.start`:
requests of one connection interleave, as on protocol v1) or in the caller's task
(:meth:`Requests.run`: one after the other, as on Wyoming).

Text for a text stream that is still being admitted and prepared is held
(:class:`EarlyText`): in characters, at most ``limits.max_text_chars`` however many
messages bring it (more: the request ends with ``text_too_long`` once open, as it would
when open), and handed to the stream as one append (two with a flush) when it opens.
"""

from __future__ import annotations

import asyncio
import io
from collections.abc import Awaitable, Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any

from appliance.core.service import Stream
from appliance.doors.frame.ending import Ending, Report, settle
from appliance.errors import ErrorCode, ServiceError


@dataclass
class EarlyText:
    """Text for a stream still being opened: characters (at most ``limit``), the last
    flush among them, and whether it is finished."""

    limit: int
    chars: int = 0
    flush_at: int = -1
    """Characters up to the last flush (-1: none)."""
    finished: bool = False
    error: ServiceError | None = None
    """Set when the text went over ``limit``: the request ends with it once open."""
    _buf: io.StringIO = field(default_factory=io.StringIO)

    def add(self, text: str, flush: bool = False) -> None:
        """Hold ``text``; ServiceError (what an open stream says) for text after finish."""
        if self.finished:
            raise ServiceError(ErrorCode.BAD_REQUEST, "the text of this request is finished")
        if self.error is not None:
            return  # it ends with text_too_long once open: nothing more to keep
        if self.chars + len(text) > self.limit:
            self.error = ServiceError(
                ErrorCode.TEXT_TOO_LONG,
                f"text would have more than {self.limit} characters; the limit is {self.limit}",
            )
            self._buf = io.StringIO()  # nothing of it will be spoken
            return
        self._buf.write(text)
        self.chars += len(text)
        if flush:
            self.flush_at = self.chars

    def hand_to(self, stream: Stream) -> None:
        """What is held, into the open ``stream`` (its own failures end it through run)."""
        if self.error is not None:
            return
        text = self._buf.getvalue()
        cut = max(self.flush_at, 0)
        if self.flush_at >= 0:
            stream.append(text[:cut], flush=True)
        if text[cut:]:
            stream.append(text[cut:])
        if self.finished:
            stream.finish()


class Request:
    """One request of a connection, from its message to its ending."""

    def __init__(self, key: Hashable, op: str, text_limit: int | None = None) -> None:
        self.key = key
        self.op = op
        self.task: asyncio.Task[None] | None = None
        self.stream: Stream | None = None
        self.cancel_reason: str | None = None
        self.refused: ServiceError | None = None
        """Failed before its stream opened (a bad chunk of text): it ends with this, and
        text that still comes for it is dropped."""
        self.early = EarlyText(text_limit) if text_limit is not None else None
        """A text stream's text until its stream opens (None: not a text stream)."""

    def cancel(self, reason: str) -> None:
        """End it as cancelled: now if its stream is open, else as soon as it opens."""
        if self.cancel_reason is None:
            self.cancel_reason = reason
        if self.stream is not None:
            self.stream.cancel(reason)

    def fail(self, exc: ServiceError) -> None:
        """End it with ``exc`` (through its stream's run once it is open)."""
        if self.stream is not None:
            self.stream.fail(exc)
        elif self.refused is None:
            self.refused = exc

    def opened(self, stream: Stream) -> ServiceError | None:
        """Its stream is open: a cancel that came meanwhile applies, the text held goes in.
        Returns the error it is to end with instead (its text went over the limit, or a
        chunk of it was bad), for the door to apply (v1: through the stream, after start;
        Wyoming: at once)."""
        self.stream = stream
        if self.cancel_reason is not None:
            stream.cancel(self.cancel_reason)
        early, self.early = self.early, None
        if self.refused is not None:
            return self.refused
        if early is None:
            return None
        if early.error is not None:
            return early.error
        early.hand_to(stream)
        return None

    @property
    def takes_text(self) -> bool:
        """More text may come: held until the stream opens, or its open stream takes it."""
        if self.refused is not None:
            return False
        if self.stream is None:
            return self.early is not None and not self.early.finished
        return self.stream.takes_text

    def add_text(self, text: str, flush: bool = False) -> None:
        """Text for this text stream; ServiceError when it takes none (finished, not a
        text stream); dropped once it is refused."""
        if self.refused is not None:
            return
        if self.stream is None and self.early is not None:
            self.early.add(text, flush)
        elif self.stream is not None:
            self.stream.append(text, flush=flush)
        else:
            raise ServiceError(ErrorCode.BAD_REQUEST, f"{self.key} is not a text stream")

    def finish(self) -> None:
        """No more text (ServiceError when already finished)."""
        if self.refused is not None:
            return
        if self.stream is None and self.early is not None:
            if self.early.finished:
                raise ServiceError(ErrorCode.BAD_REQUEST, "the text of this request is finished")
            self.early.finished = True
        elif self.stream is not None:
            self.stream.finish()

    def end_text(self) -> None:
        """No more text comes (the client half-closed or left): a text stream ends with
        what it has."""
        if self.takes_text:
            try:
                self.finish()
            except ServiceError:
                pass  # finished already


EndOf = Callable[[Request, Ending[Any]], Awaitable[None]]
"""Tells the client how a request ended (the session's terminal writer)."""


class Requests:
    """A connection's requests by key, each ending once through ``end``."""

    def __init__(self, end: EndOf, report: Report, whose: str, on_done: Callable[[], None]):
        self._items: dict[Hashable, Request] = {}
        self._end = end
        self._report = report
        self._whose = whose
        self._on_done = on_done

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[Request]:
        return iter(list(self._items.values()))

    def get(self, key: Hashable) -> Request | None:
        return self._items.get(key)

    def add(self, req: Request) -> None:
        self._items[req.key] = req

    def release(self, req: Request) -> None:
        """Forget ``req`` (its ending is told, or its door took it over)."""
        if self._items.get(req.key) is req:
            del self._items[req.key]

    def start(self, req: Request, body: Awaitable[Any]) -> asyncio.Task[None]:
        """Run ``body`` as a task of its own; its ending is told when it ends."""
        self.add(req)
        task = asyncio.create_task(self.run(req, body))
        req.task = task
        return task

    async def run(self, req: Request, body: Awaitable[Any]) -> None:
        """Run ``body`` here; then its ending is told, once."""
        self.add(req)
        try:
            ending = await settle(body, self._report, req.op, self._whose)
            await self._end(req, ending)
        finally:
            self.release(req)
            self._on_done()

    def cancel_all(self, reason: str) -> None:
        for req in self:
            req.cancel(reason)

    def tasks(self) -> list[asyncio.Task[None]]:
        return [r.task for r in self if r.task is not None]
