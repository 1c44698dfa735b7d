"""The state file: every original value, saved before anything changes.

tuned keeps originals in memory and loses them when it crashes; here they are
on disk (default ``/run/ttsd-tuning/tuning.json``, cleared by a reboot together
with the changes themselves) so ``ttsd tune revert`` in a fresh process, e.g.
systemd's ``ExecStopPost`` after the daemon crashed, can undo everything.

``apply`` and ``revert`` run as root while the daemon does not, so the file is
an attack surface: whoever can write it decides what root writes where.  It is
therefore kept in a directory of its own that only root can write (not the
service's ``RuntimeDirectory``, which belongs to the service user), and every
directory from the root prefix down to it is opened one component at a time
with ``O_NOFOLLOW`` and checked: a directory, owned by root (or the caller), not
writable by group or others, as ssh checks its key files.  A state file found
anywhere else is refused whole.  What an entry may name is checked separately
(:func:`tuning.ops.load_state`).

Writes are atomic: a temporary file with a random name created ``O_EXCL |
O_NOFOLLOW`` in the same directory, ``fsync``, ``rename`` over the old one,
``fsync`` of the directory.  A crash leaves the old state or the new one, never
half of either.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = "ttsd.tune.state/1"
DEFAULT_STATE_FILE = "/run/ttsd-tuning/tuning.json"
MAX_STATE_BYTES = 1 << 20
"""A real state holds a few hundred entries of a few hundred bytes each."""
_STATE_DIR_MODE = 0o755
"""Root writes, everyone may read: ``plan`` and ``verify`` without root still see which
settings the system refused (``skipped``)."""
_STATE_FILE_MODE = 0o644
_SHOW = 60
"""Longest piece of file content quoted in a message."""


class StateError(Exception):
    """The state file exists but cannot be used."""


def shorten(value: Any) -> str:
    """``repr(value)`` cut to a length a message can carry."""
    text = repr(value)
    return text if len(text) <= _SHOW else text[: _SHOW - 3] + "..."


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
            raise StateError(f"entry is not a mapping: {shorten(data)}")
        try:
            key, kind, params, original = (
                data["key"],
                data["kind"],
                data["params"],
                data["original"],
            )
        except KeyError as exc:
            raise StateError(f"entry without {exc}: {shorten(data)}") from exc
        if not (isinstance(key, str) and isinstance(kind, str) and isinstance(params, dict)):
            raise StateError(f"malformed entry: {shorten(data)}")
        if not isinstance(original, str):
            raise StateError(f"malformed original in entry {shorten(key)}: {shorten(original)}")
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


# ------------------------------------------------------------------ the safe directory


def _parts(path: Path, root: Path) -> tuple[list[str], str]:
    """The directory components from ``root`` down to the file, and the file's name."""
    try:
        rel = path.relative_to(root)
    except ValueError:
        raise StateError(f"{path}: state file is not inside the root {root}") from None
    parts = list(rel.parts)
    if not parts or any(p in ("..", ".") for p in parts):
        raise StateError(f"{path}: not a plain path inside the root {root}")
    return parts[:-1], parts[-1]


def _check_owner(st: os.stat_result, shown: Path, what: str) -> None:
    if st.st_uid not in (0, os.geteuid()):
        raise StateError(
            f"{shown}: {what} owned by uid {st.st_uid}, not root: refused "
            "(whoever owns it could make `tune revert` write anywhere as root)"
        )
    if st.st_mode & 0o022:
        raise StateError(
            f"{shown}: {what} writable by group or others (mode {stat.S_IMODE(st.st_mode):o}):"
            " refused (anyone who can write there could make `tune revert` write anywhere"
            " as root)"
        )


@contextlib.contextmanager
def _state_dir(path: Path, root: Path, *, create: bool) -> Iterator[int | None]:
    """A descriptor of the state file's directory, every component checked; None if missing.

    The root prefix itself is trusted (the administrator chose it).  With ``create``,
    missing directories are made: the state directory itself 0755 and owned by the
    caller, so no one else ever had a chance to plant anything in it."""
    dirs, _ = _parts(path, root)
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise StateError(f"{root}: cannot open the root: {exc.strerror}") from exc
    shown = root
    try:
        for name in dirs:
            shown = shown / name
            try:
                nfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    yield None
                    return
                with contextlib.suppress(FileExistsError):  # made meanwhile: checked below
                    os.mkdir(name, _STATE_DIR_MODE, dir_fd=fd)
                nfd = _open_dir(name, fd, shown)
            except OSError as exc:
                raise _not_a_dir(shown, exc) from exc
            os.close(fd)
            fd = nfd
            _check_owner(os.fstat(fd), shown, "directory")
        yield fd
    finally:
        os.close(fd)


def _open_dir(name: str, dir_fd: int, shown: Path) -> int:
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError as exc:
        raise _not_a_dir(shown, exc) from exc


def _not_a_dir(shown: Path, exc: OSError) -> StateError:
    # O_NOFOLLOW|O_DIRECTORY on a symlink gives ELOOP or ENOTDIR.
    return StateError(
        f"{shown}: cannot use as the state directory ({exc.strerror}; a symlink or a file "
        "there is refused)"
    )


# ------------------------------------------------------------------ load / save / remove


def load(path: Path, *, root: Path = Path("/")) -> State | None:
    """The saved state; None when there is none.  ``path`` lies inside ``root``."""
    with _state_dir(path, root, create=False) as dfd:
        if dfd is None:
            return None
        text = _read(dfd, path)
    if text is None:
        return None
    return _parse(text, path)


def _read(dfd: int, path: Path) -> str | None:
    try:
        fd = os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StateError(f"{path}: cannot read: {exc.strerror} (a symlink is refused)") from exc
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise StateError(f"{path}: not a regular file: refused")
        _check_owner(st, path, "state file")
        if st.st_size > MAX_STATE_BYTES:
            raise StateError(f"{path}: larger than {MAX_STATE_BYTES} bytes: refused")
        data = os.read(fd, MAX_STATE_BYTES + 1)
    except OSError as exc:
        raise StateError(f"{path}: cannot read: {exc.strerror}") from exc
    finally:
        os.close(fd)
    if len(data) > MAX_STATE_BYTES:
        raise StateError(f"{path}: larger than {MAX_STATE_BYTES} bytes: refused")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise StateError(f"{path}: not UTF-8 (byte {exc.start})") from exc


def _parse(text: str, path: Path) -> State:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StateError(f"{path}: not JSON: {exc}") from exc
    except RecursionError:
        raise StateError(f"{path}: not a {SCHEMA} file (nested too deeply)") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise StateError(f"{path}: not a {SCHEMA} file")
    entries = data.get("entries", [])
    skipped = data.get("skipped", {})
    if not isinstance(entries, list) or not isinstance(skipped, dict):
        raise StateError(f"{path}: malformed")
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in skipped.items()):
        raise StateError(f"{path}: malformed skipped settings")
    created = data.get("created", 0.0)
    if (
        isinstance(created, bool)
        or not isinstance(created, int | float)
        or not math.isfinite(created)
    ):
        raise StateError(f"{path}: created must be a number (a time), got {shorten(created)}")
    try:
        parsed = [Entry.from_json(e) for e in entries]
    except StateError as exc:
        raise StateError(f"{path}: {exc}") from exc
    return State(entries=parsed, skipped=dict(skipped), created=float(created))


def save(path: Path, state: State, *, root: Path = Path("/")) -> None:
    """Atomically replace ``path`` (inside ``root``) with ``state``."""
    data = (json.dumps(state.to_json(), indent=1, sort_keys=True) + "\n").encode("utf-8")
    with _state_dir(path, root, create=True) as dfd:
        assert dfd is not None  # create=True makes it or raises
        # A random name, never an existing file: nothing planted can be followed.
        tmp = f".{path.name}.{secrets.token_hex(8)}.tmp"
        try:
            fd = os.open(
                tmp,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                _STATE_FILE_MODE,
                dir_fd=dfd,
            )
        except OSError as exc:
            raise StateError(f"{path.parent / tmp}: cannot create: {exc.strerror}") from exc
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path.name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise StateError(f"{path}: cannot write: {exc.strerror}") from exc
        # The rename is durable only once the directory itself is on disk.
        os.fsync(dfd)


def remove(path: Path, *, root: Path = Path("/")) -> None:
    with _state_dir(path, root, create=False) as dfd:
        if dfd is None:
            return
        try:
            os.unlink(path.name, dir_fd=dfd)
        except FileNotFoundError:
            return
        os.fsync(dfd)
