"""Keep the daemon's resident memory flat over days of requests.

glibc gives each thread that allocates its own malloc arena and returns freed
heap pages to the kernel lazily.  With inference workers, executor threads
and ONNX Runtime's pools allocating buffers of varying sizes, RSS creeps up
although nothing leaks.  Fewer arenas, blocks of a megabyte or more mapped on
their own (given back to the kernel when freed) and an occasional
``malloc_trim`` when the daemon is idle keep it where it settled after
warm-up.  All are no-ops where glibc is not the C library.

The interpreter's own collector: what a start-up made is frozen (:func:`freeze`), so a
collection walks only what came after it, and its pauses are counted
(:class:`Collections`, ``ttsd_gc_*`` in the metrics).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import logging
import os
import time

log = logging.getLogger(__name__)

_M_ARENA_MAX = -8  # from glibc's malloc.h
_M_MMAP_THRESHOLD = -3

MMAP_THRESHOLD = 1 << 20
"""Blocks of this many bytes or more get a mapping of their own, unmapped when freed.
glibc's default starts at 128 KiB and rises to the largest block freed (up to 32 MiB),
after which such blocks come from the heap and stay there once freed: the regions ONNX
Runtime's arenas give back after a long run (``appliance.model.engine.onnx``) held the
idle daemon at 272 MB; mapped on their own, 191 MB (at 4 MiB, 204 MB)."""


@functools.lru_cache(maxsize=1)
def _libc() -> ctypes.CDLL | None:
    # Found once: find_library runs ``ldconfig -p`` in a child process each time, and a
    # serving daemon trims every few seconds.
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        return None
    return lib if hasattr(lib, "malloc_trim") and hasattr(lib, "mallopt") else None


def limit_malloc_arenas(arenas: int = 2, mmap_threshold: int = MMAP_THRESHOLD) -> bool:
    """Cap glibc's malloc arenas and fix its mmap threshold (:data:`MMAP_THRESHOLD`; an
    operator's ``MALLOC_MMAP_THRESHOLD_`` wins); call before worker threads start."""
    lib = _libc()
    if lib is None:
        return False
    ok = bool(lib.mallopt(ctypes.c_int(_M_ARENA_MAX), ctypes.c_int(arenas)))
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        ok &= bool(lib.mallopt(ctypes.c_int(_M_MMAP_THRESHOLD), ctypes.c_int(mmap_threshold)))
    log.debug("malloc arenas capped at %d, blocks from %d B mapped: %s", arenas, mmap_threshold, ok)
    return ok


def trim() -> bool:
    """Return free heap pages to the kernel (takes a few ms: run it off the event loop)."""
    lib = _libc()
    if lib is None:
        return False
    return bool(lib.malloc_trim(ctypes.c_size_t(0)))


def collect_garbage() -> int:
    """Free what only reference cycles keep alive: a full collection, which Python runs
    only when allocations pass its thresholds, so an idle daemon runs none.  It holds the
    interpreter while it walks every object not frozen: ~1 ms in a serving daemon, whose
    start-up is (:func:`freeze`; 13–80 ms before it was); off the loop, at a quiet moment,
    before :func:`trim`."""
    return gc.collect()


def freeze(generation: int = 2) -> int:
    """Collect, then move every object left into the permanent generation, which no
    collection walks again: the modules, the voices and the runtime a start-up made are
    ~50 000 objects that every full collection walked (18–72 ms holding the interpreter
    on this 2-core box; an automatic one mid-stream took 56 ms).  Objects frozen are still
    freed when their last reference goes, but never as garbage in cycles: call it once
    what it freezes is to live as long as the process, and :func:`thaw` before anything
    frozen may be dropped (a reload).  ``generation``: how far the collection goes (1
    right after a full one, whose survivors are all in the oldest generation already, so
    only what came since is walked).  Returns the objects frozen."""
    gc.collect(generation)
    gc.freeze()
    return gc.get_freeze_count()


def thaw() -> None:
    """Undo :func:`freeze`: the frozen objects are collected as any other again."""
    gc.unfreeze()


class Collections:
    """The interpreter's collections, per generation: how many, how long they held the
    interpreter in all, the longest (through ``gc.callbacks``, in whatever thread
    collects; one collection runs at a time).  :meth:`install` and :meth:`remove`: the
    daemon's start and close."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self.longest = [0.0, 0.0, 0.0]
        self._began: float | None = None

    def install(self) -> None:
        if self._note not in gc.callbacks:
            gc.callbacks.append(self._note)

    def remove(self) -> None:
        if self._note in gc.callbacks:
            gc.callbacks.remove(self._note)

    def _note(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
            return
        if self._began is None:
            return  # installed while a collection ran
        took, self._began = time.perf_counter() - self._began, None
        g = info["generation"]
        self.count[g] += 1
        self.seconds[g] += took
        self.longest[g] = max(self.longest[g], took)
