"""GPU watchdog against a fake NVML with pynvml's names."""

from __future__ import annotations

import logging
import threading

import pytest

from appliance.ops.watchdog import Alarm, GpuWatchdog, Reading
from tests.fakes.gpu_nvml import FakeNvml


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(
    nvml: FakeNvml, clock: Clock | None = None
) -> tuple[GpuWatchdog, list[Alarm], list[Reading]]:
    alarms: list[Alarm] = []
    readings: list[Reading] = []
    dog = GpuWatchdog(
        nvml, 0, 3600.0, alarms.append, on_reading=readings.append, clock=clock or Clock()
    )
    return dog, alarms, readings


@pytest.fixture
def nvml() -> FakeNvml:
    return FakeNvml()


def test_baseline_and_healthy_readings(nvml: FakeNvml) -> None:
    dog, alarms, readings = make(nvml)
    dog.start()
    try:
        assert dog.baseline == (5, 16)
        reading = dog.poll_once()
        assert reading.healthy
        assert (reading.pcie_gen, reading.pcie_width, reading.temperature_c) == (5, 16, 45)
        assert readings and readings[-1] is reading
        assert alarms == []
    finally:
        dog.stop()


def test_width_downgrade_alarms_once_then_clears(
    nvml: FakeNvml, caplog: pytest.LogCaptureFixture
) -> None:
    dog, alarms, _ = make(nvml)
    dog.start()
    dog.stop()  # drive the polls by hand
    nvml.width = 8
    assert not dog.poll_once().healthy
    dog.poll_once()
    assert [a.kind for a in alarms] == ["link_degraded"]
    assert "x8" in alarms[0].reason and "x16" in alarms[0].reason
    assert any(r.levelno == logging.ERROR and "ALARM" in r.message for r in caplog.records)
    nvml.width = 16
    assert dog.poll_once().healthy
    nvml.width = 4
    dog.poll_once()
    assert len(alarms) == 2  # a new episode is a new alarm


def test_generation_drop_counts_only_when_busy(nvml: FakeNvml) -> None:
    dog, alarms, _ = make(nvml)
    dog.start()
    dog.stop()
    nvml.gen, nvml.utilization = 1, 0  # idle GPUs slow their link to save power
    assert dog.poll_once().healthy
    nvml.utilization = 80
    assert not dog.poll_once().healthy
    assert alarms[0].kind == "link_degraded" and "gen 1" in alarms[0].reason


def test_replay_rate_uses_dcgm_limit_per_minute(nvml: FakeNvml) -> None:
    clock = Clock()
    dog, alarms, _ = make(nvml, clock)
    dog.start()
    dog.stop()
    dog.poll_once()
    clock.now += 30
    nvml.replays = 8
    assert dog.poll_once().healthy  # 8 in a minute is DCGM's limit, not over it
    clock.now += 61
    nvml.replays = 16
    assert dog.poll_once().healthy  # 8 more within the last minute
    clock.now += 10
    nvml.replays = 17
    reading = dog.poll_once()
    assert reading.replays_last_minute == 9
    assert [a.kind for a in alarms] == ["replay_rate"]


@pytest.mark.parametrize("code", [15, 16, 28, 999])
def test_lost_errors_mean_gpu_lost(nvml: FakeNvml, code: int) -> None:
    dog, alarms, readings = make(nvml)
    dog.start()
    dog.stop()
    nvml.lost = code
    assert not dog.poll_once().healthy
    assert [a.kind for a in alarms] == ["gpu_lost"]
    assert not readings[-1].healthy


def test_unsupported_reading_is_skipped_not_alarmed(nvml: FakeNvml) -> None:
    nvml.temperature_supported = False
    dog, alarms, _ = make(nvml)
    dog.start()
    dog.stop()
    reading = dog.poll_once()
    assert reading.healthy and reading.temperature_c is None
    assert alarms == []


def test_xid_events_on_their_own_thread(nvml: FakeNvml) -> None:
    got = threading.Event()
    alarms: list[Alarm] = []

    def on_alarm(alarm: Alarm) -> None:
        alarms.append(alarm)
        got.set()

    dog = GpuWatchdog(nvml, 0, 3600.0, on_alarm)
    dog.start()
    try:
        nvml.inject_xid(13)  # not critical: logged only
        nvml.inject_xid(79)
        assert got.wait(5)
        assert [(a.kind, a.reason) for a in alarms] == [("xid", "GPU has fallen off the bus")]
    finally:
        dog.stop()
    assert nvml.event_sets_freed == 1


def test_without_xid_support_it_polls_only(
    nvml: FakeNvml, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    nvml.xid_supported = False
    dog, _, _ = make(nvml)
    dog.start()
    dog.stop()
    assert any("Xid events not available" in r.message for r in caplog.records)
    assert [t.name for t in dog._threads] == ["gpu-watchdog"]


def test_polling_thread_runs_and_stops(nvml: FakeNvml) -> None:
    seen = threading.Event()
    dog = GpuWatchdog(nvml, 0, 0.01, lambda a: None, on_reading=lambda r: seen.set())
    dog.start()
    assert seen.wait(5)
    dog.stop()
    assert not any(t.is_alive() for t in dog._threads)
