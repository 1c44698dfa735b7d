"""The stream's rhythm as plain arithmetic: when it counts as running, stalled, flowing."""

from __future__ import annotations

import threading

from appliance.playback.flow import FlowWatch


def watch(rate: int = 1000, latency_s: float = 0.02, now: float = 100.0) -> FlowWatch:
    flow = FlowWatch()
    flow.reset(rate, latency_s, now)
    return flow


def test_steady_after_enough_audio_without_a_pause() -> None:
    flow = watch()  # 100 frames (0.1 s at least), gaps up to 0.1 s
    assert flow.note(100.00, 50) is True  # the stream's first callback
    assert not flow.steady_now(100.00) and not flow.wait_steady(0)
    assert flow.note(100.05, 50) is False
    assert flow.steady_now(100.06) and flow.wait_steady(0)
    assert not flow.steady_now(100.2)  # silent for longer than the gap: not now


def test_a_pause_starts_the_run_again() -> None:
    flow = watch()
    flow.note(100.0, 60)
    assert flow.paused(101.9)  # read before the callback is noted
    flow.note(101.9, 60)  # ALSA's pulse plugin sat ~1.9 s after its first callbacks
    assert not flow.steady_now(101.9)
    flow.note(101.95, 60)
    assert flow.steady_now(101.95)


def test_a_pause_is_a_gap_over_twice_the_latency_after_the_first_callback() -> None:
    flow = watch()  # gaps up to 0.1 s
    assert not flow.paused(105.0)  # no callback yet: a start-up wait is no pause
    flow.note(105.0, 20)
    assert not flow.paused(105.09)
    assert flow.paused(105.11)


def test_a_long_latency_asks_for_four_latencies_of_audio() -> None:
    flow = watch(latency_s=0.1)  # 400 frames, gaps up to 0.2 s
    for i in range(7):
        flow.note(100.0 + 0.15 * i, 50)
    assert not flow.steady_now(101.0)
    flow.note(101.05, 50)
    assert flow.steady_now(101.05)


def test_silence_and_flowing_follow_the_last_callback() -> None:
    flow = watch()
    assert not flow.flowing(100.0)  # never called back
    flow.note(100.0, 10)
    assert flow.flowing(100.4) and not flow.flowing(100.6)
    assert abs(flow.silent_for(103.5) - 3.5) < 1e-9


def test_reset_forgets_the_old_stream() -> None:
    flow = watch()
    flow.note(100.0, 500)
    assert flow.wait_steady(0)
    flow.reset(1000, 0.02, 200.0)
    assert not flow.wait_steady(0) and flow.flowing_since is None
    assert flow.note(200.0, 10) is True


def test_wait_steady_wakes_when_another_thread_makes_it_steady() -> None:
    flow = watch()
    timer = threading.Timer(0.05, flow.note, args=(100.0, 200))
    timer.start()
    assert flow.wait_steady(5.0)
    timer.join()
