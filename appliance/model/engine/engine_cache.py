"""On-disk cache of serialized TensorRT engines, verified before use.

A TensorRT plan is only valid for the TensorRT version, GPU and precision that
built it, and for the exact model.  Each plan file has a JSON sidecar holding
that key plus the plan's sha256; :meth:`EngineCache.lookup` compares the
sidecar with what is running now and says *why* a plan cannot be used.  The
caller rebuilds and logs a WARNING, so an upgrade never turns into a silent
slower path (the seed's TensorRT 8.6.2 vs 8.6.1 story).

A lock file (``fcntl.flock``) keeps two builders (``ttsd prepare`` and a
starting daemon) from building the same engines at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

SIDECAR_VERSION = 1

Status = Literal["hit", "miss", "mismatch", "corrupt", "rejected"]


@dataclass(frozen=True)
class EngineKey:
    """Everything a plan depends on."""

    voice: str
    part: str
    """``encoder`` or ``decoder``."""
    model_sha256: str
    tensorrt: str
    gpu_name: str
    compute_capability: str
    precision: str
    profile: tuple[int, int, int]
    """(min, opt, max) of the dynamic dimension the engine was built for."""

    def stem(self) -> str:
        gpu = re.sub(r"[^A-Za-z0-9]+", "_", self.gpu_name).strip("_").lower() or "gpu"
        voice = re.sub(r"[^A-Za-z0-9._-]+", "_", self.voice)
        sm = self.compute_capability.replace(".", "")
        return f"{voice}.{self.part}.{self.precision}.{gpu}.sm{sm}"

    def as_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["profile"] = list(self.profile)
        return d


@dataclass(frozen=True)
class Lookup:
    status: Status
    plan: bytes | None = None
    reason: str = ""
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)


class EngineCache:
    """Plans and sidecars in one directory."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def plan_path(self, key: EngineKey) -> Path:
        return self.directory / f"{key.stem()}.plan"

    def sidecar_path(self, key: EngineKey) -> Path:
        return self.directory / f"{key.stem()}.json"

    def lookup(self, key: EngineKey) -> Lookup:
        """Read and verify the plan for ``key``; never raises for a bad file."""
        sidecar = self.sidecar_path(key)
        try:
            meta = json.loads(sidecar.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return Lookup("miss", reason="no cached engine")
        except (OSError, ValueError) as exc:
            return Lookup("corrupt", reason=f"unreadable sidecar {sidecar.name}: {exc}")
        if not isinstance(meta, dict) or not isinstance(meta.get("key"), dict):
            return Lookup("corrupt", reason=f"sidecar {sidecar.name} has no key")
        differences = _differences(meta["key"], key.as_dict())
        if differences:
            return Lookup("mismatch", reason="; ".join(differences), meta=meta)
        if meta.get("rejected"):
            return Lookup("rejected", reason=str(meta["rejected"]), meta=meta)
        try:
            plan = self.plan_path(key).read_bytes()
        except OSError as exc:
            return Lookup("corrupt", reason=f"plan unreadable: {exc}", meta=meta)
        digest = hashlib.sha256(plan).hexdigest()
        if digest != meta.get("plan_sha256"):
            return Lookup("corrupt", reason="plan checksum does not match its sidecar", meta=meta)
        return Lookup("hit", plan=plan, meta=meta)

    def store(self, key: EngineKey, plan: bytes, extra: dict[str, Any] | None = None) -> Path:
        """Write the plan, then its sidecar (the sidecar is the commit record)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.plan_path(key)
        _atomic_write(path, plan)
        meta = {
            "version": SIDECAR_VERSION,
            "key": key.as_dict(),
            "plan_sha256": hashlib.sha256(plan).hexdigest(),
            "plan_bytes": len(plan),
            **(extra or {}),
        }
        _atomic_write(self.sidecar_path(key), json.dumps(meta, indent=2).encode())
        return path

    def reject(self, key: EngineKey, reason: str) -> None:
        """Remember that this key failed the accuracy gate, so it is not rebuilt every start."""
        self.directory.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.plan_path(key).unlink()
        meta = {"version": SIDECAR_VERSION, "key": key.as_dict(), "rejected": reason}
        _atomic_write(self.sidecar_path(key), json.dumps(meta, indent=2).encode())

    @contextlib.contextmanager
    def build_lock(self) -> Iterator[None]:
        """Exclusive lock over building in this directory (blocks until free)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.directory / ".build.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def _differences(stored: dict[str, Any], current: dict[str, Any]) -> list[str]:
    out = []
    for name, value in current.items():
        if stored.get(name) != value:
            out.append(f"{name}: cached {stored.get(name)!r}, running {value!r}")
    return out


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
