"""Where the daemon's socket lives by default, and whether that place can be trusted.

A user's daemon listens on ``$XDG_RUNTIME_DIR/ttsd/ttsd.sock``, or, without
``XDG_RUNTIME_DIR``, on ``/tmp/ttsd-UID/ttsd/ttsd.sock``.  ``/tmp`` is everyone's:
another user can create ``/tmp/ttsd-UID`` first and listen there, and would then
receive the victim's text.  So, as ssh does with ``~/.ssh``, the client and the
daemon accept these directories only when they are real directories (not
symlinks), owned by the user, and not writable by group or others; the daemon
creates them 0700.  A socket path given explicitly (``--socket``,
``v1.socket``, ``$TTSD_SOCKET``) is the user's own choice and is not checked.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

SYSTEM_SOCKET = Path("/run/ttsd/ttsd.sock")


class UnsafeSocketDirError(OSError):
    """The default socket's directory could belong to someone else; the message says why."""


def default_socket_path() -> Path:
    if os.geteuid() == 0:
        return SYSTEM_SOCKET
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR") or str(_fallback_dir())
    return Path(runtime_dir) / "ttsd" / "ttsd.sock"


def _fallback_dir() -> Path:
    return Path(f"/tmp/ttsd-{os.getuid()}")


def private_dirs(path: Path) -> list[Path]:
    """The directories that must be the user's own for ``path`` to be trusted, outermost
    first; empty for a path that is not the per-user default."""
    if os.geteuid() == 0 or path != default_socket_path():
        return []
    dirs = [path.parent]
    if path.parent.parent == _fallback_dir():
        dirs.insert(0, path.parent.parent)
    return dirs


def check_private_dir(directory: Path) -> None:
    """Raise :class:`UnsafeSocketDirError` unless ``directory`` is a directory (not a
    symlink) owned by this user and not writable by group or others."""
    st = os.lstat(directory)  # FileNotFoundError is the caller's business
    uid = os.geteuid()
    if stat.S_ISLNK(st.st_mode):
        why = "is a symlink"
    elif not stat.S_ISDIR(st.st_mode):
        why = "is not a directory"
    elif st.st_uid != uid:
        why = f"is owned by uid {st.st_uid}, not by you (uid {uid})"
    elif st.st_mode & 0o022:
        why = f"is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    else:
        return
    raise UnsafeSocketDirError(
        f"{directory} {why}: another user could be listening there in the daemon's place;"
        " refusing to use it (remove it, or name a socket with --socket or $TTSD_SOCKET)"
    )


def check_socket_path(path: Path) -> None:
    """For a client: raise :class:`UnsafeSocketDirError` if a directory of the per-user
    default ``path`` exists but is not the user's own (missing ones are fine: nothing
    listens there)."""
    for directory in private_dirs(path):
        try:
            check_private_dir(directory)
        except FileNotFoundError:
            return


def prepare_socket_dir(path: Path) -> None:
    """For the daemon: make the directory ``path`` goes in.

    The per-user default's directories are made 0700 one at a time and each is checked
    after ``mkdir`` (it may have been there already, made by anyone); any other directory
    is made as it always was (the path was configured on purpose)."""
    dirs = private_dirs(path)
    if not dirs:
        path.parent.mkdir(parents=True, exist_ok=True)
        return
    dirs[0].parent.mkdir(parents=True, exist_ok=True)  # /tmp or $XDG_RUNTIME_DIR
    for directory in dirs:
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            pass  # checked below like a new one
        check_private_dir(directory)


def default_cache_dir() -> Path:
    """Where split voices and engines are cached: /var/cache/ttsd as root (the unit's
    CacheDirectory), else $XDG_CACHE_HOME/ttsd."""
    if os.geteuid() == 0:
        return Path("/var/cache/ttsd")
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ttsd"
