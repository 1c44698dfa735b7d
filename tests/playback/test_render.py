"""The audio callback as a function: blocks filled from the lineup, without a device.

PortAudio's own status flags (``sounddevice.CallbackFlags``) and numpy blocks shaped as
PortAudio hands them over; the callback is called here the way the audio thread calls it."""

from __future__ import annotations

import threading
import time

import numpy as np
import numpy.typing as npt
import pytest
import sounddevice as sd

from appliance.ops.config import PlaybackConfig
from appliance.playback.lineup import Lineup
from appliance.playback.render import Renderer, fade_ramps
from appliance.playback.utterance import Utterance

RATE = 8000


class Clock:
    """The callback's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = time.monotonic()  # utterances are stamped with the real clock

    def __call__(self) -> float:
        return self.now


def rig(fade_ms: float = 5.0, clock: Clock | None = None) -> tuple[Lineup, Renderer]:
    # No thread priority: the callback runs on the test's own thread here.
    cfg = PlaybackConfig(fade_ms=fade_ms, realtime_priority=0, nice=0)
    lineup = Lineup()
    lineup.set_state("ok", "")
    render = Renderer(cfg, lineup, threading.Event(), clock or time.monotonic)
    render.prepare(RATE, 0.02)
    return lineup, render


def block(
    render: Renderer, frames: int, channels: int = 1, underflow: bool = False
) -> npt.NDArray[np.float32]:
    out = np.full((frames, channels), 7.0, dtype=np.float32)  # garbage: all of it is written
    flags = sd.CallbackFlags()
    flags.output_underflow = underflow
    render.callback(out, frames, None, flags)
    return out


def ramp(n: int, start: float = 0.0) -> npt.NDArray[np.float32]:
    return (start + np.arange(n, dtype=np.float32)) / 1000.0


def submit(lineup: Lineup, samples: npt.NDArray[np.float32], done: bool = True) -> Utterance:
    utt = lineup.submit("message", 1.0, RATE, RATE, "c")
    utt.push(samples)
    if done:
        utt.finish()
    return utt


def kinds(render: Renderer) -> list[tuple[str, int | None, object]]:
    return [(k, u.id if u else None, a) for k, u, a in render.events]


def test_the_next_utterance_starts_in_the_same_block_without_a_gap() -> None:
    lineup, render = rig()
    a, b = submit(lineup, ramp(50)), submit(lineup, ramp(200, 500))
    out = block(render, 128)
    np.testing.assert_array_equal(out[:50, 0], ramp(50))
    np.testing.assert_array_equal(out[50:, 0], ramp(78, 500))
    assert kinds(render) == [
        ("started", a.id, None),
        ("ended", a.id, "done"),
        ("started", b.id, None),
    ]
    assert lineup.playing is b and a.frames_played == 50
    assert a.latency_ms is not None and a.latency_ms >= 20.0  # the device's latency counts


def test_idle_blocks_are_silence_and_stereo_copies_the_channel() -> None:
    lineup, render = rig()
    assert not block(render, 64, channels=2).any()
    submit(lineup, ramp(100))
    out = block(render, 64, channels=2)
    np.testing.assert_array_equal(out[:, 0], out[:, 1])
    np.testing.assert_array_equal(out[:, 0], ramp(64))
    assert render.callbacks == 2 and render.priority_applied == "none"


def test_a_cut_fades_out_within_fade_ms_then_silence() -> None:
    lineup, render = rig(fade_ms=2.0)  # 16 samples at 8 kHz
    utt = submit(lineup, np.ones(1000, np.float32), done=False)
    block(render, 32)
    assert lineup.stop("c") == 1
    out = block(render, 64)[:, 0]
    np.testing.assert_allclose(out[:16], fade_ramps(RATE, 2.0)[16])
    assert out[0] == 1.0 and 0.0 < out[15] < 0.1 and not out[16:].any()
    assert kinds(render)[-1] == ("ended", utt.id, "cancelled")
    assert lineup.playing is None


def test_a_starved_producer_is_one_underrun_until_it_catches_up() -> None:
    lineup, render = rig()
    utt = submit(lineup, ramp(40), done=False)
    block(render, 64)
    block(render, 64)  # still nothing: the same underrun
    assert (utt.underruns, render.starved) == (1, 1)
    utt.push(ramp(100))
    out = block(render, 64)
    np.testing.assert_array_equal(out[:, 0], ramp(64))
    block(render, 64, underflow=True)  # PortAudio says the device ran dry
    assert (utt.underruns, render.starved, render.status_underflows) == (3, 2, 1)


def test_a_pause_in_the_callbacks_mid_utterance_is_an_underrun() -> None:
    # Through ALSA's pulse plugin a stalled sound server asks again ~2 s later with no
    # underflow flag: every sample after it, and its mark, is heard that much later.
    clock = Clock()
    lineup, render = rig(clock=clock)
    block(render, 64)  # the stream runs; nothing to say: a pause now is nobody's
    clock.now += 1.0
    utt = submit(lineup, ramp(1000))
    block(render, 64)
    assert (utt.underruns, render.paused) == (0, 0)
    clock.now += 0.008  # the next block on time
    block(render, 64)
    clock.now += 1.9
    out = block(render, 64)
    np.testing.assert_array_equal(out[:, 0], ramp(64, 128))  # nothing skipped
    assert (utt.underruns, render.paused, render.status_underflows) == (1, 1, 0)


def test_an_error_in_the_callback_plays_silence_and_is_reported() -> None:
    lineup, render = rig()
    utt = submit(lineup, ramp(100))
    utt._chunks.appendleft(np.zeros((2, 2), np.float32))  # a chunk no block can take
    out = block(render, 64)
    assert not out.any() and render.callback_errors == 1
    assert render.events[-1][0] == "error"


@pytest.mark.parametrize("fade_ms", [0.5, 5.0])
def test_fade_ramps_go_from_one_towards_zero(fade_ms: float) -> None:
    ramps = fade_ramps(48000, fade_ms)
    assert len(ramps) == round(48 * fade_ms) + 1
    assert all(len(r) == k for k, r in enumerate(ramps))
    assert ramps[-1][0] == 1.0 and ramps[-1][-1] < 1.0 / len(ramps[-1]) + 1e-6
