"""What a voice's parts cost on this machine, kept beside its cut for the next start.

A start measures what admission and a quick start plan with (CPU seconds per second of
a stream's audio, a first chunk's decode, the prior per phoneme id): one clause through
a stream's shapes, ~0.7 s on two cores before the daemon could take requests (issue 42:
the warm-up itself is to take ≤ 0.5 s).  The clean measure of the last start, kept in
the cut's cache slot, stands in for it until this start's own, made in the background,
replaces it; without one (a first start) the start measures before it serves, as before.

Bounds: one small JSON file per voice and backend; a file that is unreadable, of another
machine (CPU model, logical CPUs) or out of range is ignored, never trusted.  Lifecycle:
read while a voice loads, written once a start's background warm-up measured cleanly
(no request beside it), both off the event loop.
"""

from __future__ import annotations

import json
import logging
import math
import os
import platform
from dataclasses import asdict, dataclass
from pathlib import Path

from appliance.ops import atomic
from appliance.voicetypes import Voice

log = logging.getLogger("appliance.model.voices")

_RANGES = {
    "stream_cost": (1e-4, 20.0),
    "first_decode_s": (1e-5, 10.0),
    "prior_s_per_id": (1e-7, 1.0),
}


@dataclass(frozen=True)
class StoredCosts:
    """A voice's costs as the last start measured them (see the module)."""

    stream_cost: float
    """CPU seconds per second of audio of a stream's later clauses."""
    first_decode_s: float
    """A first chunk's flow and decoder window, seconds."""
    prior_s_per_id: float
    """A whole sentence's prior, seconds per phoneme id."""


def _machine() -> str:
    """This machine as far as the costs go: the CPU model and the logical CPUs."""
    model = platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.partition(":")[2].strip()
                    break
    except OSError:
        pass  # not Linux's /proc: the architecture stands for the model
    return f"{model}|{os.cpu_count()}"


def _path(voice: Voice, backend: str) -> Path | None:
    if voice.encoder_path is None or not backend.replace("-", "").isalnum():
        return None
    return voice.encoder_path.parent / f"costs-{backend}.json"


def read_costs(voice: Voice, backend: str) -> StoredCosts | None:
    """The costs the last start on this machine measured for ``voice`` on ``backend``."""
    path = _path(voice, backend)
    if path is None or not path.is_file():
        return None
    try:
        data = json.loads(path.read_bytes()[:4096])
        if data.get("machine") != _machine():
            return None
        values = {k: float(data[k]) for k in _RANGES}
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        log.debug("voice %s: stored costs ignored: %s", voice.name, exc)
        return None
    for k, (lo, hi) in _RANGES.items():
        if not (math.isfinite(values[k]) and lo <= values[k] <= hi):
            return None
    return StoredCosts(**values)


def write_costs(voice: Voice, backend: str, costs: StoredCosts) -> None:
    """Keep ``costs`` for the next start (a cache that cannot be written keeps none)."""
    path = _path(voice, backend)
    if path is None:
        return
    data = {"machine": _machine(), **asdict(costs)}
    try:
        atomic.write_bytes(path, json.dumps(data).encode())
    except (OSError, atomic.Abandoned) as exc:
        log.debug("voice %s: costs not kept: %s", voice.name, exc)
