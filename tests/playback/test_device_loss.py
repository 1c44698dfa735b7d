"""Losing the device: PulseAudio killed mid-utterance, and no device at start-up.

Its own module: killing the server takes the device from every stream, and each test
here opens its own player (one player per process at a time)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from appliance.playback import NoAudioDevice, Player
from bench.pulsesink import PulseServer, first_loud
from tests.playback.audio import make_config, push_all, tone, wait_flowing


def wait_state(player: Player, state: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if player.health()["state"] == state:
            return
        time.sleep(0.02)
    raise AssertionError(f"state never became {state}: {player.health()}")


def test_pulse_killed_mid_utterance_then_back(pulse: PulseServer) -> None:
    player = Player.open(make_config(sample_rate=pulse.rate), rescan=True)
    try:
        wait_flowing(player)
        utt = player.submit("message", 1.0, 22050, "c")
        push_all(utt, tone(440, 3.0))
        assert utt.wait_started_sync(timeout=10)
        time.sleep(0.3)
        pulse.kill()

        wait_state(player, "degraded", timeout=5)
        end = utt.wait_ended_sync(timeout=5)
        assert end is not None and end.reason == "device_lost" and end.interrupted
        h = player.health()
        assert "lost" in h["reason"]
        with pytest.raises(NoAudioDevice):
            player.submit("message", 1.0, 22050, "c")
        assert player.stats()["device_losses"] == 1

        pulse.launch()
        wait_state(player, "ok", timeout=10)
        wait_flowing(player)
        with pulse.record() as rec:
            again = player.submit("message", 1.0, 22050, "c")
            push_all(again, tone(440, 0.3))
            end2 = again.wait_ended_sync(timeout=10)
            time.sleep(0.2)
        assert end2 is not None and end2.reason == "done"
        x = rec.samples()
        assert first_loud(x, 0.05) >= 0, "nothing reached the sink after the reopen"
        assert float(np.max(np.abs(x))) > 0.2
        assert player.stats()["reopens"] >= 1
    finally:
        player.close()
        pulse.launch()


def test_no_device_at_start_means_off_not_an_exception(pulse: PulseServer) -> None:
    p = Player.open(make_config(device="no-such-device-xyz"), rescan=True)
    try:
        h = p.health()
        assert h["state"] == "off", h
        # In a user's terms, with the way out (not PortAudio's "Error querying device").
        assert "audio output device 'no-such-device-xyz' not found" in h["reason"], h
        assert "python -m sounddevice" in h["reason"] and "querying" not in h["reason"], h
        with pytest.raises(NoAudioDevice):
            p.submit("message", 1.0, 22050, "x")
    finally:
        p.close()
    off = Player.open(make_config(enabled=False))
    assert off.health()["state"] == "off"
    with pytest.raises(NoAudioDevice):
        off.submit("message", 1.0, 22050, "x")
    off.close()
