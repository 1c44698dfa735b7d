"""Parts of a running item, without a scheduler: taken and run elsewhere, or run by the
item itself when nobody took them."""

from __future__ import annotations

import threading

import pytest

from appliance.core.parts import Parts
from appliance.model.engine.interrupt import Interrupted, StopToken, current


def test_a_part_nobody_took_runs_where_its_result_is_needed() -> None:
    lock = threading.Lock()
    parts = Parts(lock)
    with lock:
        join = parts.offer_locked(threading.get_ident, None)
    assert join() == threading.get_ident()
    with lock:
        assert parts.take_locked() is None  # gone from the queue


def test_a_taken_part_runs_on_the_taker_under_the_items_token() -> None:
    lock = threading.Lock()
    parts = Parts(lock)
    token = StopToken()
    with lock:
        join = parts.offer_locked(lambda: (threading.get_ident(), current()), token)
        part = parts.take_locked()
    assert part is not None
    taker = threading.Thread(target=part.run)
    taker.start()
    ident, seen = join()
    taker.join()
    assert ident == taker.ident and seen is token


def test_a_part_that_failed_or_was_stopped_raises_in_its_item() -> None:
    lock = threading.Lock()
    parts = Parts(lock)

    def stopped() -> None:
        raise Interrupted("stopped")

    with lock:
        join = parts.offer_locked(stopped, StopToken())
        part = parts.take_locked()
    assert part is not None
    part.run()
    with pytest.raises(Interrupted):
        join()


def test_a_yielding_part_stopped_for_another_request_runs_in_its_item() -> None:
    """A due item's part is stopped when another request's work comes
    (``stop_yielding_locked``): the taker's run ends, and the item runs the part itself."""
    lock = threading.Lock()
    parts = Parts(lock)

    def run() -> int:
        token = current()
        if token is not None:
            with token.hooked(lambda: None):  # a model run: raises once stopped
                pass
        return threading.get_ident()

    with lock:
        join = parts.offer_yielding_locked(run)
        part = parts.take_locked()
        parts.stop_yielding_locked()
    assert part is not None
    taker = threading.Thread(target=part.run)
    taker.start()
    taker.join()
    assert isinstance(part.error, Interrupted)
    assert join() == threading.get_ident()
