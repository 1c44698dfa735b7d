"""The reopen back-off: doubling to a ceiling, and a failure said only when it is news."""

from __future__ import annotations

import time

from appliance.ops.config import PlaybackConfig
from appliance.playback.supervisor import Backoff


def test_delays_double_to_the_ceiling_and_a_loss_starts_again() -> None:
    b = Backoff(PlaybackConfig(reopen_min_s=0.5, reopen_max_s=3.0))
    delays = []
    for _ in range(5):
        b.failed("gone")
        delays.append(b.delay_s)
    assert delays == [1.0, 2.0, 3.0, 3.0, 3.0]
    assert b.next_at > time.monotonic() + 2.5
    b.reset()
    assert b.delay_s == 0.5 and b.next_at <= time.monotonic() + 0.5


def test_only_news_is_said() -> None:
    b = Backoff(PlaybackConfig(reopen_min_s=0.5, reopen_max_s=8.0))
    b.first_failure("no device")  # said by start() already
    assert b.failed("no device") is False
    assert b.failed("busy") is True
    assert b.failed("busy") is False
    b.delay_s = 8.0
    assert b.failed("gone again") is False  # at the ceiling: never news any more
    b.succeeded()
    assert b.delay_s == 0.5
