"""The setting type: read, desired, apply, verify, revert.

A :class:`Setting` is one value on one object (the governor of cpu3, the
affinity of IRQ 45, the locked clocks of GPU 0).  Its constructor takes only
JSON-friendly keyword arguments and :meth:`Setting.params` returns exactly
those, so the state file can rebuild the setting in a later process (after a
crash of the one that applied it) and call :meth:`Setting.revert` with the
saved original.
"""

from __future__ import annotations

import errno
import os
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from tuning.sysfs import SysRoot, parse_cpulist


class SettingError(Exception):
    """Reading, applying or reverting failed; the message names the setting and the cause."""


class SettingUnsupported(SettingError):
    """The system refused in a way that means "not tunable here" (apply skips it, no failure)."""


class SettingGone(SettingError):
    """The object no longer exists (IRQ freed, GPU removed): nothing left to revert."""


class NotPlanned(SettingError):
    """A state entry the planner could never have produced: the whole state file is refused."""


_MAX_TEXT = 200
_MAX_ORIGINAL = 4096
_KERNEL_TEXT = re.compile(r"[\x20-\x7e\t\n]*")
"""What sysfs/procfs attributes and the GPU settings read back: printable ASCII lines."""


_CPU_RANGE = r"[0-9]{1,5}(?:-[0-9]{1,5})?"
_CPULIST = re.compile(rf"{_CPU_RANGE}(?:,{_CPU_RANGE}){{0,1023}}")


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_text(what: str, value: Any, limit: int = _MAX_TEXT) -> str:
    """``value`` if it is short printable text, else :class:`NotPlanned`."""
    if not isinstance(value, str) or len(value) > limit or not _KERNEL_TEXT.fullmatch(value):
        raise NotPlanned(f"{what} {_short(value)} is not short printable text")
    return value


def check_within(fs: SysRoot, rel: str, top: str) -> None:
    """``rel`` resolves (symlinks followed) to a place under ``<root>/<top>``."""
    if ".." in rel.split("/"):
        raise NotPlanned(f"path {_short(rel)} has a '..' component")
    real = os.path.realpath(fs.path(rel))
    base = os.path.realpath(fs.path(top))
    if os.path.commonpath([real, base]) != base:
        raise NotPlanned(f"path {_short(rel)} leads to {_short(real)}, outside {base}")


@dataclass(frozen=True)
class Host:
    """What settings act on: the root-prefixed file tree and the NVML seam (None = no NVML)."""

    fs: SysRoot
    nvml: Any | None = None


class Setting(ABC):
    kind: ClassVar[str]
    needs_root: ClassVar[bool] = True

    def __init__(self, host: Host, *, name: str, target: str, reason: str) -> None:
        self.host = host
        self.name = name
        self.target = target
        self.reason = reason

    @property
    def key(self) -> str:
        """Stable identity across processes, used in the state file."""
        return f"{self.kind}:{self.target}"

    def params(self) -> dict[str, Any]:
        return {"name": self.name, "target": self.target, "reason": self.reason}

    @abstractmethod
    def read(self) -> str:
        """The current value in the form :meth:`revert` takes back."""

    @abstractmethod
    def desired(self) -> str: ...

    @abstractmethod
    def apply(self) -> None: ...

    @abstractmethod
    def matches(self, value: str) -> bool:
        """Whether ``value`` (as returned by :meth:`read`) is the desired state."""

    @abstractmethod
    def revert(self, original: str) -> None: ...

    def verify(self) -> bool:
        return self.matches(self.read())

    def check_planned(self, original: str) -> None:
        """Raise :class:`NotPlanned` unless the planner could have made this setting and read
        ``original`` from it.  Run on every entry of a state file before any is reverted:
        ``revert`` writes what the file says as root."""
        check_text("name", self.name)
        check_text("target", self.target)
        check_text("reason", self.reason)
        check_text("original", original, _MAX_ORIGINAL)

    def already_set(self) -> bool:
        """Whether apply can be skipped; settings whose state NVML cannot read say False."""
        return self.verify()

    def show(self, value: str) -> str:
        """``value`` for a human."""
        return value.strip()


class SysfsAttribute(Setting):
    """One sysfs/procfs attribute holding a word (governor, EPP)."""

    kind = "sysfs"
    path_pattern: ClassVar[re.Pattern[str]] = re.compile(
        r"/sys/devices/system/cpu/cpu[0-9]{1,5}/cpufreq/"
        r"(?:scaling_governor|energy_performance_preference)"
    )
    """The only files of this kind the planner writes (``tuning.plan``)."""
    top: ClassVar[str] = "/sys"
    """Where those files must still be once symlinks are followed."""

    def __init__(
        self, host: Host, *, name: str, target: str, reason: str, path: str, value: str
    ) -> None:
        super().__init__(host, name=name, target=target, reason=reason)
        self.path = path
        self.value = value

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.path}"

    def params(self) -> dict[str, Any]:
        return {**super().params(), "path": self.path, "value": self.value}

    def read(self) -> str:
        try:
            return self.host.fs.read(self.path)
        except OSError as exc:
            raise self._error("cannot read", exc) from exc

    def desired(self) -> str:
        return self.value

    def matches(self, value: str) -> bool:
        return value.strip() == self.value

    def apply(self) -> None:
        self._write(self.value, "cannot set")

    def revert(self, original: str) -> None:
        # The original is written back byte for byte (trailing newline included).
        self._write(original, "cannot restore")

    def check_planned(self, original: str) -> None:
        super().check_planned(original)
        path = check_text("path", self.path)
        if not self.path_pattern.fullmatch(path):
            raise NotPlanned(f"path {_short(path)}: not a file `tune apply` ever writes")
        check_within(self.host.fs, path, self.top)
        self.check_value()

    def check_value(self) -> None:
        if self.value != "performance":
            raise NotPlanned(f"value {_short(self.value)}: `tune apply` only sets performance")

    def _write(self, value: str, what: str) -> None:
        try:
            self.host.fs.write(self.path, value)
        except OSError as exc:
            raise self._error(what, exc) from exc

    def _error(self, what: str, exc: OSError) -> SettingError:
        msg = f"{self.name} {self.target}: {what} {self.path}: {exc.strerror or exc}"
        if exc.errno == errno.ENOENT:
            return SettingGone(msg)
        return SettingError(msg)


class IrqAffinity(SysfsAttribute):
    """``/proc/irq/N/smp_affinity_list``; the kernel answers EIO for IRQs it manages itself."""

    kind = "irq-affinity"
    path_pattern = re.compile(r"/proc/irq/[0-9]{1,7}/smp_affinity_list")
    top = "/proc"

    def check_value(self) -> None:
        # Numbers of at most 5 digits: a range like 0-999999999 would not fit in memory.
        if not _CPULIST.fullmatch(self.value) or not parse_cpulist(self.value):
            raise NotPlanned(f"value {_short(self.value)}: not a CPU list")

    def matches(self, value: str) -> bool:
        try:
            return parse_cpulist(value) == parse_cpulist(self.value)
        except ValueError:
            return False

    def _error(self, what: str, exc: OSError) -> SettingError:
        if exc.errno == errno.EIO:
            return SettingUnsupported(
                f"{self.name} {self.target}: kernel-managed IRQ (write gave EIO), left as it is"
            )
        return super()._error(what, exc)
