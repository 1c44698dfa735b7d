"""The pacer alone: frame boundaries, padding, the start buffer, the clock, a late stream."""

from __future__ import annotations

import asyncio
import itertools
import time

from appliance.doors.pace import PacedFrame, Pacer


async def _pace(
    pieces: list[tuple[bytes, str]], pace_ms: int, rate: int, gap_s: float = 0.0
) -> list[tuple[float, PacedFrame[str]]]:
    got: list[tuple[float, PacedFrame[str]]] = []

    async def send(frame: PacedFrame[str]) -> None:
        got.append((time.monotonic(), frame))

    pacer: Pacer[str] = Pacer(pace_ms, rate, 1, lambda n: b"\xff" * n, send)
    for data, tag in pieces:
        await pacer.put(data, tag)
        if gap_s:
            await asyncio.sleep(gap_s)
    await pacer.close()
    return got


def test_frames_exact_and_padded() -> None:
    pieces = [(b"a" * 250, "A"), (b"b" * 300, "B")]  # 550 bytes = 3 frames of 160 + 70
    got = asyncio.run(_pace(pieces, 20, 8000))
    frames = [f for _, f in got]
    assert [len(f.data) for f in frames] == [160, 160, 160, 160]
    assert b"".join(f.data for f in frames) == b"a" * 250 + b"b" * 300 + b"\xff" * 90
    assert [f.offset_s for f in frames] == [0.0, 0.02, 0.04, 0.06]
    assert frames[1].pieces == ["A", "B"] and frames[1].starts == ["B"] and frames[1].ends == ["A"]
    assert frames[3].ends == ["B"]


def test_on_the_clock_after_the_start_buffer() -> None:
    got = asyncio.run(_pace([(b"x" * 8000, "X")], 20, 8000))  # 1 s: 50 frames
    t = [ts for ts, _ in got]
    assert len(t) == 50
    assert t[1] - t[0] < 0.01  # 40 ms start buffer: 2 frames at once
    late = [t[k] - (t[0] + (k - 1) * 0.02) for k in range(2, 50)]
    assert min(late) >= -0.001 and max(late) < 0.02, (min(late), max(late))


def test_uneven_rate_is_exact_on_average() -> None:
    got = asyncio.run(_pace([(b"x" * 22050, "X")], 10, 22050))
    sizes = [len(f.data) for _, f in got]
    assert set(sizes) == {220, 221} and sum(sizes) == 22050


def test_late_audio_restarts_the_schedule() -> None:
    """Frames made late leave when made; audio that then comes at once is paced from the
    late frame on, not sent in a burst to catch up with the old schedule."""

    async def run() -> list[float]:
        times: list[float] = []

        async def send(frame: PacedFrame[str]) -> None:
            times.append(time.monotonic())

        pacer: Pacer[str] = Pacer(20, 8000, 1, lambda n: b"\xff" * n, send)
        for i in range(8):  # 20 ms of audio every 80 ms: behind from frame 5 on
            await pacer.put(b"x" * 160, str(i))
            await asyncio.sleep(0.08)
        await pacer.put(b"y" * 1600, "rest")  # 10 frames at once
        await pacer.close()
        assert pacer.late >= 1
        return times

    t = asyncio.run(run())
    gaps = [b - a for a, b in itertools.pairwise(t[8:])]
    assert len(gaps) == 9 and min(gaps) > 0.015, gaps
