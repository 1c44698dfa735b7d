"""Root-prefixed access to sysfs and procfs, and the kernel's CPU-list format.

Every file the tuner reads or writes goes through :class:`SysRoot`, so tests
point it at a fake tree and production points it at ``/``.  Writes are single
unbuffered ``write(2)`` calls without ``O_CREAT``: a sysfs attribute reports its
error (``EIO`` for a kernel-managed IRQ, ``EINVAL`` for a bad value) from that
call, and a missing attribute must stay missing rather than become a file.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path


class SysRoot:
    """The system being tuned, seen through a path prefix."""

    def __init__(self, root: str | os.PathLike[str] = "/") -> None:
        self.root = Path(root)

    def path(self, rel: str) -> Path:
        """Absolute system path (``/sys/...``) → path inside the root."""
        return self.root / rel.lstrip("/")

    def exists(self, rel: str) -> bool:
        return self.path(rel).exists()

    def read(self, rel: str) -> str:
        """The attribute's text exactly as the kernel gives it (trailing newline kept)."""
        with open(self.path(rel), encoding="ascii", errors="replace") as f:
            return f.read()

    def read_value(self, rel: str) -> str:
        return self.read(rel).strip()

    def write(self, rel: str, value: str) -> None:
        fd = os.open(self.path(rel), os.O_WRONLY | os.O_TRUNC)
        try:
            os.write(fd, value.encode("ascii"))
        finally:
            os.close(fd)

    def listdir(self, rel: str) -> list[str]:
        return sorted(os.listdir(self.path(rel)))


def parse_cpulist(text: str) -> frozenset[int]:
    """``"0-3,8,10-11"`` → {0, 1, 2, 3, 8, 10, 11}.  Empty text is the empty set."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, _, hi = part.partition("-")
            # "0-7:2" (stride) is accepted by the kernel on input; it never prints it.
            hi, _, stride = hi.partition(":")
            cpus.update(range(int(lo), int(hi) + 1, int(stride) if stride else 1))
        else:
            cpus.add(int(part))
    return frozenset(cpus)


def format_cpulist(cpus: Iterable[int]) -> str:
    """{0, 1, 2, 3, 8} → ``"0-3,8"`` (the kernel's own canonical form)."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def online_cpus(fs: SysRoot) -> frozenset[int]:
    return parse_cpulist(fs.read("/sys/devices/system/cpu/online"))
