"""The heap trims (appliance.ops.memory): glibc found once, not at every trim."""

from __future__ import annotations

import subprocess
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
