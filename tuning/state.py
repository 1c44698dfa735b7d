"""The state file: every original value, saved before anything changes.

tuned keeps originals in memory and loses them when it crashes; here they are
on disk (default ``/run/ttsd/tuning.json``, cleared by a reboot together with
the changes themselves) so ``ttsd tune revert`` in a fresh process, e.g.
systemd's ``ExecStopPost`` after the daemon crashed, can undo everything.

Writes are atomic: a temporary file in the same directory, ``fsync``, ``rename``
over the old one, ``fsync`` of the directory.  A crash leaves the old state or
the new one, never half of either.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = "ttsd.tune.state/1"


class StateError(Exception):
    """The state file exists but cannot be used."""


@dataclass(frozen=True)
class Entry:
    key: str
    kind: str
    params: dict[str, Any]
    original: str

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "kind": self.kind,
            "params": self.params,
            "original": self.original,
        }

    @staticmethod
    def from_json(data: Any) -> Entry:
        if not isinstance(data, dict):
            raise StateError(f"entry is not a mapping: {data!r}")
        try:
            key, kind, params, original = (
                data["key"],
                data["kind"],
                data["params"],
                data["original"],
            )
        except KeyError as exc:
            raise StateError(f"entry without {exc}: {data!r}") from exc
        if not (isinstance(key, str) and isinstance(kind, str) and isinstance(params, dict)):
            raise StateError(f"malformed entry: {data!r}")
        if not isinstance(original, str):
            raise StateError(f"malformed original in entry {key}: {original!r}")
        return Entry(key=key, kind=kind, params=params, original=original)


@dataclass
class State:
    """Entries in the order they were applied (revert walks them backwards)."""

    entries: list[Entry] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    """Settings the system refused as untunable (managed IRQs); verify does not count them."""
    created: float = field(default_factory=time.time)

    def keys(self) -> set[str]:
        return {e.key for e in self.entries}

    def add(self, entry: Entry) -> None:
        """Record an original unless one is recorded already: the first one is the true one."""
        if entry.key not in self.keys():
            self.entries.append(entry)

    def remove(self, key: str) -> None:
        self.entries = [e for e in self.entries if e.key != key]
        self.skipped.pop(key, None)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "created": self.created,
            "entries": [e.to_json() for e in self.entries],
            "skipped": dict(self.skipped),
        }


def load(path: Path) -> State | None:
    """The saved state; None when there is none."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StateError(f"{path}: cannot read: {exc.strerror}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StateError(f"{path}: not JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise StateError(f"{path}: not a {SCHEMA} file")
    entries = data.get("entries", [])
    skipped = data.get("skipped", {})
    if not isinstance(entries, list) or not isinstance(skipped, dict):
        raise StateError(f"{path}: malformed")
    return State(
        entries=[Entry.from_json(e) for e in entries],
        skipped={str(k): str(v) for k, v in skipped.items()},
        created=float(data.get("created", 0.0)),
    )


def save(path: Path, state: State) -> None:
    """Atomically replace ``path`` with ``state``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    data = (json.dumps(state.to_json(), indent=1, sort_keys=True) + "\n").encode("utf-8")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        return
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    # The rename/unlink is durable only once the directory itself is on disk.
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
