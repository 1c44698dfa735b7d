"""Files written whole or not at all: the content goes to a temporary file beside the
destination, renamed over it once complete (``os.replace`` is atomic in a file system).

A process that must stop in the middle of a write (Ctrl-C while a voice is cut for the
first time: the daemon exits at once instead of waiting seconds for the cut, issue 42)
calls :func:`abandon` first: the temporary files of the writes under way are removed and
no new one is started, so nothing half-written is left.  A temporary name carries its
writer's pid, so :func:`sweep` can remove those of a process that died outright (SIGKILL,
power loss) without touching another live process's writes.

Lifecycle: one process-wide set of the writes under way, behind one lock (a write runs in
whatever thread does the slow work; :func:`abandon` comes from the main thread).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


class Abandoned(RuntimeError):
    """A write asked for after :func:`abandon`: the process is stopping."""


_lock = threading.Lock()
_under_way: set[Path] = set()
_abandoned = False

_TEMP = re.compile(r"^\..+\.(\d+)\.[0-9a-f]{8}\.tmp$")


@contextlib.contextmanager
def writing(dest: Path) -> Iterator[BinaryIO]:
    """A binary file to write ``dest``'s content to: ``dest`` once the block ends without
    an error, nothing otherwise.  The file is written through this object, never reopened
    by name: after :func:`abandon` removed its name, nothing can bring it back."""
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    with _lock:
        if _abandoned:
            raise Abandoned(f"not writing {dest}: the process is stopping")
        f = tmp.open("xb")
        _under_way.add(tmp)
    try:
        with f:
            yield f
        os.replace(tmp, dest)
    finally:
        with _lock:
            _under_way.discard(tmp)
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def write_bytes(dest: Path, data: bytes) -> None:
    with writing(dest) as f:
        f.write(data)


def abandon() -> None:
    """Remove the temporary files of every write under way and refuse new ones (see the
    module); a write that finishes meanwhile fails to rename, its destination untouched."""
    global _abandoned
    with _lock:
        _abandoned = True
        for tmp in _under_way:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
        _under_way.clear()


def sweep(directory: Path) -> list[Path]:
    """Remove the temporary files in ``directory`` left by processes that no longer run;
    the ones removed."""
    gone: list[Path] = []
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return gone
    for name in names:
        m = _TEMP.match(name)
        if m is None or _alive(int(m.group(1))):
            continue
        with contextlib.suppress(FileNotFoundError):
            (directory / name).unlink()
            gone.append(directory / name)
    return gone


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True
