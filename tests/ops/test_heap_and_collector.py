"""appliance.ops.memory: glibc found once, not at every trim; the start-up frozen, and
the collections counted."""

from __future__ import annotations

import gc
import subprocess
import weakref
from typing import Any

import pytest

from appliance.ops import memory


def test_a_trim_starts_no_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """``ctypes.util.find_library`` runs ``ldconfig -p`` in a child process: a serving
    daemon trims every few seconds, and each trim started one."""
    memory.trim()  # the C library found here, if it was not yet

    def no_child(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"a trim started a process: {args}")

    monkeypatch.setattr(subprocess, "Popen", no_child)
    for _ in range(3):
        memory.trim()


class _Node:
    def __init__(self) -> None:
        self.me = self


def test_freeze_collects_first_and_thaw_undoes_it() -> None:
    """Garbage is collected before the freeze, not frozen with the rest; what is frozen
    is not collected, even in a cycle, until thawed."""
    garbage, kept = _Node(), _Node()
    dropped, frozen = weakref.ref(garbage), weakref.ref(kept)
    del garbage
    try:
        assert memory.freeze() > 0
        assert dropped() is None
        del kept  # now garbage in a cycle, but frozen
        gc.collect()
        assert frozen() is not None  # frozen: a collection does not walk it
    finally:
        memory.thaw()
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert frozen() is None


def test_collections_counts_each_generation_while_installed() -> None:
    c = memory.Collections()
    c.install()
    c.install()  # once only
    try:
        gc.collect(0)
        gc.collect()
        assert c.count[0] >= 1 and c.count[2] >= 1
        assert c.seconds[2] > 0 and c.longest[2] <= c.seconds[2]
    finally:
        c.remove()
    counted = list(c.count)
    gc.collect()
    assert c.count == counted
