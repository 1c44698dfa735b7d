"""The one seam to TensorRT and the CUDA runtime.

The GPU backend never imports ``tensorrt`` or ``cuda`` itself: it receives a
:class:`TrtRuntime` holding the two modules.  In production ``load()`` imports
them (extra ``gpu``: ``tensorrt`` 10, ``cuda-python``); tests pass fakes with
the same names, so every line of the backend runs on a machine without a GPU.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TrtRuntime:
    """The TensorRT module and the CUDA runtime bindings, as one unit."""

    trt: Any
    """The ``tensorrt`` module (TensorRT 10 Python API)."""
    cudart: Any
    """``cuda.bindings.runtime`` (cuda-python ≥ 12.6) or the older ``cuda.cudart``."""

    @property
    def version(self) -> str:
        return str(self.trt.__version__)


def load() -> TrtRuntime | None:
    """Import TensorRT and cuda-python; None when either is missing."""
    try:
        import tensorrt
    except ImportError as exc:
        log.debug("TensorRT unavailable: %s", exc)
        return None
    cudart = load_cudart()
    if cudart is None:
        return None
    major = int(str(tensorrt.__version__).split(".", 1)[0])
    if major < 10:
        log.warning("TensorRT %s is too old (need 10 or newer)", tensorrt.__version__)
        return None
    return TrtRuntime(trt=tensorrt, cudart=cudart)


def load_cudart() -> Any | None:
    """Import the CUDA runtime bindings alone (the device check needs no TensorRT);
    None when cuda-python is missing."""
    try:
        from cuda.bindings import runtime as cudart
    except ImportError:
        try:  # cuda-python < 12.6 spelled the module cuda.cudart
            from cuda import cudart
        except ImportError as exc:
            log.debug("cuda-python unavailable: %s", exc)
            return None
    return cudart
