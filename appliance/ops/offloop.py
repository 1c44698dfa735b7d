"""Blocking work off the event loop in threads of its own, which a stop need not wait for.

Not the loop's executor: ``asyncio.run`` joins its threads at exit, so a start-up step
still running (a voice's first cut) kept Ctrl-C waiting seconds for it, and one read
stuck in the kernel (a hung network file system) kept SIGTERM from stopping the daemon.

Bounds: one thread per call, a daemon thread, left to the process's exit when it never
returns; :class:`FileReads` starts at most one read of a name while an earlier one is
stuck.  Lifecycle: a future per call, settled on the loop (or dropped when the loop has
closed).
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable
from typing import TypeVar

_T = TypeVar("_T")


def in_thread(
    fn: Callable[[], _T], name: str, done: Callable[[], None] | None = None
) -> asyncio.Future[_T]:
    """``fn()`` in a daemon thread of its own; its result or exception in the future, and
    ``done()`` called on the loop when it returns (even if the future was cancelled)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[_T] = loop.create_future()
    threading.Thread(
        target=_settle_from_thread, args=(loop, fut, fn, done), name=name, daemon=True
    ).start()
    return fut


class FileReads:
    """Blocking file reads (config, lexicon) in threads of their own, with a deadline.

    A read past its deadline is left behind in a daemon thread; while it is stuck, another
    read of the same file is refused rather than started beside it."""

    def __init__(self) -> None:
        self._stuck: set[str] = set()

    async def run(
        self,
        fn: Callable[[], _T],
        name: str,
        timeout_s: float,
        error: Callable[[str], Exception],
    ) -> _T:
        """``fn()``'s result; ``error`` of a one-line message on a timeout or while an
        earlier read of ``name`` is stuck."""
        if name in self._stuck:
            raise error(f"{name}: an earlier read has not returned; not reading it again yet")
        self._stuck.add(name)
        fut = in_thread(fn, "ttsd-read", functools.partial(self._stuck.discard, name))
        try:
            return await asyncio.wait_for(fut, timeout_s)  # cancels fut: the late result is dropped
        except TimeoutError:
            raise error(f"{name}: not read within {timeout_s:g} s") from None


def _settle_from_thread(
    loop: asyncio.AbstractEventLoop,
    fut: asyncio.Future[_T],
    fn: Callable[[], _T],
    done: Callable[[], None] | None,
) -> None:
    def settle(result: _T | None, exc: BaseException | None) -> None:
        if done is not None:
            done()
        if not fut.done():
            if exc is not None:
                fut.set_exception(exc)
            else:
                fut.set_result(result)  # type: ignore[arg-type]

    try:
        result, exc = fn(), None
    except Exception as error:  # handed to the awaiting task, which reports it
        result, exc = None, error
    try:
        loop.call_soon_threadsafe(settle, result, exc)
    except RuntimeError:
        pass  # the loop is closed: the daemon stopped while this thread ran
