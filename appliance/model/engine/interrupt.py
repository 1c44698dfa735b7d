"""Stopping an inference call from another thread.

Work done ahead of time (a window decoded before its client needs it) runs on
otherwise idle cores.  When a new request arrives, that work would share the
CPU with the newcomer's first chunk and double its time to first packet, so
the scheduler stops it and runs it again later.  The scheduler hands the
worker thread a :class:`StopToken`; a backend that can abort a run (ONNX
Runtime's ``RunOptions.terminate``) hooks into the token while it runs and
raises :class:`Interrupted` when stopped.  A backend that cannot (TensorRT,
whose calls are short) ignores the token and simply finishes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Interrupted(Exception):
    """The call was stopped by its token; the work item is to run again later."""


class StopToken:
    """Set once by the scheduler; observed by the run in progress, if any."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stopped = False
        self._hooks: list[Callable[[], None]] = []

    @property
    def stopped(self) -> bool:
        return self._stopped

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            hooks = list(self._hooks)
        for hook in hooks:
            hook()

    @contextmanager
    def hooked(self, on_stop: Callable[[], None]) -> Iterator[None]:
        """Call ``on_stop`` if the token is stopped while the block runs.

        Raises :class:`Interrupted` at once if it was stopped before the block: a
        work item made of several runs stops at the next one.
        """
        with self._lock:
            if self._stopped:
                raise Interrupted("stopped before the run")
            self._hooks.append(on_stop)
        try:
            yield
        finally:
            with self._lock:
                self._hooks.remove(on_stop)


_local = threading.local()


@contextmanager
def stoppable(token: StopToken | None) -> Iterator[None]:
    """Make ``token`` the current thread's token for the block (None: not stoppable)."""
    previous: StopToken | None = getattr(_local, "token", None)
    _local.token = token
    try:
        yield
    finally:
        _local.token = previous


def current() -> StopToken | None:
    """The token of the work item this thread runs, or None if it may not be stopped."""
    token: StopToken | None = getattr(_local, "token", None)
    return token
