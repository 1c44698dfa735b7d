"""The output device on its own: PortAudio's re-initialisation seam, a stream opened on
the PulseAudio null sink and closed, and what a user reads when the device is missing."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import sounddevice as sd

from appliance.playback.device import OutputDevice, device_problem, rescan_devices
from appliance.playback.flow import FlowWatch
from bench.pulsesink import PulseServer
from tests.playback.audio import make_config


def test_sounddevice_still_has_the_private_calls_rescan_devices_makes() -> None:
    # rescan_devices is ttsd's one use of sounddevice's private API (it has no public way
    # to re-initialise PortAudio): a release that renames these fails here, not in a daemon
    # that cannot find its speaker again.
    assert callable(getattr(sd, "_terminate", None))
    assert callable(getattr(sd, "_initialize", None))
    rescan_devices(sd)
    assert isinstance(sd.query_devices(), sd.DeviceList)  # PortAudio usable again


def test_open_runs_on_the_null_sink_and_close_is_not_a_loss(pulse: PulseServer) -> None:
    flow, wake, closing = FlowWatch(), threading.Event(), threading.Event()
    # 20 ms as the player fixture has it: "low" underruns on a busy box and never runs.
    cfg = make_config(sample_rate=pulse.rate, latency=0.02)
    device = OutputDevice(cfg, sd, flow, wake, closing)
    prepared: list[tuple[int, float]] = []

    def silence(outdata: Any, frames: int, time_info: Any, status: Any) -> None:
        outdata.fill(0)
        flow.note(time.monotonic(), frames)  # what the renderer does for the device

    info = device.open(silence, lambda r, lat: prepared.append((r, lat)), rescan=True)
    try:
        assert info.sample_rate == pulse.rate and info.channels in (1, 2)
        assert prepared == [(pulse.rate, info.latency_s)]
        assert flow.wait_steady(0) and device.trouble(time.monotonic()) is None
        stalled = device.trouble(time.monotonic() + 10) or ""
        assert stalled.startswith("no audio callback for 10."), stalled
    finally:
        device.close()
    assert device.lost is None and device.trouble(time.monotonic() + 10) is None
    assert device.info == info  # health still says what the last stream was


def test_a_missing_device_raises_what_device_problem_explains(pulse: PulseServer) -> None:
    device = OutputDevice(
        make_config(device="no-such-device-xyz"),
        sd,
        FlowWatch(),
        threading.Event(),
        threading.Event(),
    )
    with pytest.raises(ValueError) as caught:
        device.open(lambda *_: None, lambda r, lat: None, rescan=True)
    why = device_problem(caught.value, "no-such-device-xyz")
    assert why.startswith("audio output device 'no-such-device-xyz' not found")


@pytest.mark.parametrize(
    ("error", "device", "said"),
    [
        (sd.PortAudioError("Error querying device -1"), None, "no audio output device found"),
        (sd.PortAudioError("Device unavailable [PaErrorCode -9985]"), 3, "is busy"),
        (sd.PortAudioError("Invalid sample rate"), 3, "cannot be opened: Invalid sample rate"),
    ],
)
def test_device_problems_in_a_users_terms(error: Exception, device: int | None, said: str) -> None:
    assert said in device_problem(error, device)
