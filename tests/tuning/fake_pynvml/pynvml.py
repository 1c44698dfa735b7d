"""Stands in for the ``pynvml`` module in a daemon subprocess (put this folder on PYTHONPATH).

``appliance.ops.nvml.load()`` imports ``pynvml`` and calls ``nvmlInit()``; every other
name is served by the file-backed fake GPU at ``$TUNING_FAKE_NVML``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tuning_fakes import FakeNvml

_fake = FakeNvml(Path(os.environ["TUNING_FAKE_NVML"]))


def nvmlInit() -> None:
    _fake.state()  # fails loudly if the fake GPU file is missing


def __getattr__(name: str) -> Any:
    return getattr(_fake, name)
