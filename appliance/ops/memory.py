"""Keep the daemon's resident memory flat over days of requests.

glibc gives each thread that allocates its own malloc arena and returns freed
heap pages to the kernel lazily.  With inference workers, executor threads
and ONNX Runtime's pools allocating buffers of varying sizes, RSS creeps up
although nothing leaks.  Fewer arenas and an occasional ``malloc_trim`` when
the daemon is idle keep it where it settled after warm-up.  Both are no-ops
where glibc is not the C library.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

log = logging.getLogger(__name__)

_M_ARENA_MAX = -8  # from glibc's malloc.h


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        return None
    return lib if hasattr(lib, "malloc_trim") and hasattr(lib, "mallopt") else None


def limit_malloc_arenas(arenas: int = 2) -> bool:
    """Cap glibc's malloc arenas; call before worker threads start."""
    lib = _libc()
    if lib is None:
        return False
    ok = bool(lib.mallopt(ctypes.c_int(_M_ARENA_MAX), ctypes.c_int(arenas)))
    log.debug("malloc arenas capped at %d: %s", arenas, ok)
    return ok


def trim() -> bool:
    """Return free heap pages to the kernel (takes a few ms: run it off the event loop)."""
    lib = _libc()
    if lib is None:
        return False
    return bool(lib.malloc_trim(ctypes.c_size_t(0)))
