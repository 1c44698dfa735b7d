"""Stop tokens: how a scheduler stops a run in progress on another thread."""

from __future__ import annotations

import threading

import pytest

from appliance.model.engine import interrupt
from appliance.model.engine.interrupt import Interrupted, StopToken


def test_stop_calls_the_hooks_of_the_run_in_progress() -> None:
    token = StopToken()
    calls: list[str] = []
    with token.hooked(lambda: calls.append("stop")):
        assert not token.stopped
        token.stop()
        assert token.stopped
    assert calls == ["stop"]
    # Out of the block the hook is gone: a second stop calls nothing.
    token.stop()
    assert calls == ["stop"]


def test_a_run_after_the_stop_does_not_start() -> None:
    token = StopToken()
    token.stop()
    ran = []
    with pytest.raises(Interrupted), token.hooked(lambda: None):
        ran.append(True)
    assert not ran


def test_the_token_is_per_thread_and_restored() -> None:
    outer, inner = StopToken(), StopToken()
    seen: list[StopToken | None] = []
    assert interrupt.current() is None
    with interrupt.stoppable(outer):
        with interrupt.stoppable(inner):
            assert interrupt.current() is inner
            other = threading.Thread(target=lambda: seen.append(interrupt.current()))
            other.start()
            other.join()
        assert interrupt.current() is outer
    assert interrupt.current() is None
    assert seen == [None]
