"""Audio thread priority: whatever is applied is what the kernel reports for that thread."""

from __future__ import annotations

import threading

from appliance.playback.rt import apply_audio_thread_priority, describe_current_thread


def in_thread(rt: int, nice: int) -> tuple[str, str, str]:
    out: list[str] = []

    def run() -> None:
        before = describe_current_thread()
        applied = apply_audio_thread_priority(rt, nice)
        out.extend([before, applied, describe_current_thread()])

    t = threading.Thread(target=run)
    t.start()
    t.join()
    return out[0], out[1], out[2]


def test_applied_priority_is_the_threads_real_policy() -> None:
    main_before = describe_current_thread()
    _before, applied, after = in_thread(5, -5)
    assert applied in ("SCHED_FIFO 5", "nice -5", "none")
    if applied != "none":
        assert after == applied
    # Only that thread changed.
    assert describe_current_thread() == main_before


def test_nice_fallback_when_realtime_not_asked() -> None:
    before, applied, after = in_thread(0, -3)
    assert applied in ("nice -3", "none")
    assert after == (applied if applied != "none" else before)


def test_nothing_asked_nothing_applied() -> None:
    before, applied, after = in_thread(0, 0)
    assert applied == "none" and after == before
