"""The same audio for the same text (``deterministic``), on the daemon as built for serving.

Sampling noise stays on (the voice's noise_scale and noise_w): a deterministic phrase is
byte-identical every time, different phrases get different noise, windowed decoding is
still exact with the noise fed in, and requests that do not ask are as before.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from appliance.clients.client import Client
from tests.conftest import Daemon

TEXT = "The quick brown fox jumps over the lazy dog. It was not amused."


def pcm(daemon: Daemon, text: str = TEXT, **opts: Any) -> np.ndarray:
    with Client(daemon.socket) as c:
        return np.frombuffer(c.synthesize_all(text, format="f32le", **opts).audio, "<f4")


def test_same_bytes_every_time(daemon: Daemon) -> None:
    a, b = pcm(daemon, deterministic=True), pcm(daemon, deterministic=True)
    assert a.tobytes() == b.tobytes()
    # Natural variation kept: not the flat rendering without noise.
    flat = pcm(daemon, noise_scale=0.0, noise_w=0.0)
    assert len(a) != len(flat) or float(np.max(np.abs(a - flat))) > 1e-2


def test_fresh_noise_without_it(daemon: Daemon) -> None:
    a, b = pcm(daemon), pcm(daemon)
    assert a.tobytes() != b.tobytes()


def test_different_texts_different_noise(daemon: Daemon) -> None:
    """The same words in another sentence: the seed follows the phrase, so the noise
    (and the durations it draws) differ."""
    a = pcm(daemon, "Open the door.", deterministic=True)
    b = pcm(daemon, "Open the window.", deterministic=True)
    c = pcm(daemon, "Open the door.", deterministic=True, speed=1.1)
    assert a.tobytes() == pcm(daemon, "Open the door.", deterministic=True).tobytes()
    n = min(len(a), len(b))
    assert float(np.max(np.abs(a[: n // 3] - b[: n // 3]))) > 1e-3
    assert a.tobytes() != c.tobytes()


def test_windows_exact_with_fed_noise(daemon: Daemon) -> None:
    """Dialog chunks (windows of the flow and decoder) and one chunk a sentence give the
    same audio from the same seeded noise."""
    windowed = pcm(daemon, deterministic=True, mode="dialog")
    whole = pcm(daemon, deterministic=True, mode="sentence")
    assert len(windowed) == len(whole)
    assert float(np.max(np.abs(windowed - whole))) < 1e-4
