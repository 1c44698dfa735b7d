"""The one seam to NVML.

Everything that talks to the GPU's management library (tuning, watchdog, GPU
backend) gets an object with the function names and constants of the
``pynvml`` module (package ``nvidia-ml-py``).  In production that object *is*
the module; tests pass a fake with the same names.  ``load()`` returns None on
a box without NVML, which callers treat as "no GPU".
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def load() -> Any | None:
    """Import and initialise pynvml; None when the library or driver is missing."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError or a missing libnvidia-ml.so; both mean "no NVML"
        log.debug("NVML unavailable: %s", exc)
        return None
    return pynvml
