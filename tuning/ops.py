"""apply, verify and revert.

apply is all-or-nothing: the originals of everything it will touch are saved
(atomically) before the first write, and a failure part-way reverts what this
run already changed.  revert needs nothing but the state file, so it works in
a new process after the one that applied crashed; it is idempotent (a second
run finds no state and does nothing) and keeps the entries it could not
restore, so a later run can finish the job.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tuning import state as statefile
from tuning.gpu import GpuLockedClocks, GpuMemoryLockedClocks, GpuPersistence
from tuning.plan import Environment, Plan
from tuning.setting import (
    Host,
    IrqAffinity,
    NotPlanned,
    Setting,
    SettingError,
    SettingGone,
    SettingUnsupported,
    SysfsAttribute,
)
from tuning.state import Entry, State

log = logging.getLogger(__name__)

_KINDS: dict[str, type[Setting]] = {
    cls.kind: cls
    for cls in (SysfsAttribute, IrqAffinity, GpuPersistence, GpuLockedClocks, GpuMemoryLockedClocks)
}

# Settings whose value cannot be read back reliably right after apply (a locked
# clock may sit below the lock under a power or thermal limit): apply does not
# fail on them; verify still reports them.
_UNCHECKED_AFTER_APPLY = (GpuLockedClocks,)


@dataclass
class Outcome:
    command: str
    ok: bool = True
    messages: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    failed: list[str] = field(default_factory=list)
    drift: list[str] = field(default_factory=list)
    needs_root: list[str] = field(default_factory=list)

    def fail(self, message: str) -> None:
        self.ok = False
        self.messages.append(message)

    def to_json(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "ok": self.ok,
            "messages": self.messages,
            "changed": self.changed,
            "skipped": self.skipped,
            "failed": self.failed,
            "drift": self.drift,
            "needs_root": self.needs_root,
        }


def _label(s: Setting) -> str:
    return f"{s.name} {s.target}"


def rebuild(host: Host, entry: Entry) -> Setting:
    """The setting a state entry was saved from."""
    try:
        cls = _KINDS[entry.kind]
    except KeyError:
        raise SettingError(f"{entry.key}: unknown kind {entry.kind!r} in the state file") from None
    try:
        return cls(host, **entry.params)
    except TypeError as exc:
        raise SettingError(f"{entry.key}: bad parameters in the state file: {exc}") from exc


def load_state(host: Host, state_path: Path) -> State | None:
    """The state file, refused whole unless every entry is one the planner could have made.

    ``revert`` runs as root and writes each entry's original to the entry's file: an entry
    naming any other file, a value apply never sets, or a path whose symlinks lead out of
    ``/sys`` or ``/proc`` under the root could make it overwrite anything."""
    st = statefile.load(state_path, root=host.fs.root)
    if st is None:
        return None
    for i, entry in enumerate(st.entries):
        try:
            s = rebuild(host, entry)
            if s.key != entry.key:
                raise NotPlanned(f"key {statefile.shorten(entry.key)} is not the setting's {s.key}")
            s.check_planned(entry.original)
        except SettingError as exc:
            raise statefile.StateError(
                f"{state_path}: refused, nothing restored: entry {i} "
                f"({statefile.shorten(entry.key)}) is not one `tune apply` makes: {exc}"
            ) from exc
    return st


def _save(env: Environment, path: Path, st: State) -> None:
    statefile.save(path, st, root=env.host.fs.root)


def apply(plan: Plan, env: Environment, state_path: Path) -> Outcome:
    out = Outcome("apply")
    changes = plan.changes()
    if not changes:
        out.messages.append("nothing to change")
        return out
    if not env.is_root:
        out.needs_root = [_label(s) for s in changes if s.needs_root]
        if out.needs_root:
            out.fail("not running as root: nothing changed; these settings need root")
            return out
    old = load_state(env.host, state_path)
    st = old if old is not None else State()
    existing = st.keys()
    try:
        for s in changes:
            st.add(Entry(key=s.key, kind=s.kind, params=s.params(), original=s.read()))
    except SettingError as exc:
        out.fail(f"nothing changed: {exc}")
        return out
    _save(env, state_path, st)  # originals are on disk before the first write

    originals = {e.key: e.original for e in st.entries}
    touched: list[Setting] = []
    for s in changes:
        try:
            touched.append(s)
            s.apply()
            if not isinstance(s, _UNCHECKED_AFTER_APPLY) and not s.verify():
                raise SettingError(
                    f"{_label(s)}: set to {s.show(s.desired())} but reads {s.show(s.read())}"
                )
        except SettingUnsupported as exc:
            touched.pop()
            why = str(exc).removeprefix(f"{_label(s)}: ")
            st.skipped[s.key] = why
            out.skipped[_label(s)] = why
            continue
        except SettingError as exc:
            out.failed.append(str(exc))
            out.fail(f"apply failed at {_label(s)}: {exc}; rolling back")
            _rollback(touched, originals, st, existing, out)
            _store(env, state_path, st)
            return out
        out.changed.append(_label(s))
    # Entries of settings the system refused hold originals of nothing we changed.
    st.entries = [e for e in st.entries if e.key not in st.skipped or e.key in existing]
    _save(env, state_path, st)
    out.messages.append(f"changed {len(out.changed)} settings; originals in {state_path}")
    return out


def _rollback(
    touched: list[Setting],
    originals: dict[str, str],
    st: State,
    existing: set[str],
    out: Outcome,
) -> None:
    reverted = set()
    for s in reversed(touched):
        try:
            # A failed write usually changed nothing: leave such a setting alone.
            if s.read() == originals[s.key]:
                reverted.add(s.key)
                continue
        except SettingError:
            pass
        try:
            s.revert(originals[s.key])
        except SettingGone:
            pass
        except SettingError as exc:
            out.failed.append(f"rollback: {exc}")
            out.messages.append(f"could not roll back {_label(s)}; run `ttsd tune revert`")
            continue
        reverted.add(s.key)
    # Keep the originals still needed: of settings not rolled back, and of settings an
    # earlier apply changed.  Originals of settings this run never reached are dropped.
    touched_keys = {s.key for s in touched}
    st.entries = [
        e
        for e in st.entries
        if e.key not in reverted and (e.key in existing or e.key in touched_keys)
    ]
    out.messages.append(f"rolled back {len(reverted)} settings")


def _store(env: Environment, path: Path, st: State) -> None:
    if st.entries:
        _save(env, path, st)
    else:
        statefile.remove(path, root=env.host.fs.root)


def verify(plan: Plan, env: Environment, state_path: Path) -> Outcome:
    out = Outcome("verify")
    st = load_state(env.host, state_path)
    skipped = st.skipped if st is not None else {}
    for s in plan.settings():
        if s.key in skipped:
            out.skipped[_label(s)] = skipped[s.key]
            continue
        try:
            current = s.read()
        except SettingError as exc:
            out.drift.append(str(exc))
            continue
        if not s.matches(current):
            out.drift.append(f"{_label(s)}: is {s.show(current)}, want {s.show(s.desired())}")
    if out.drift:
        hint = "" if st is not None else " (no state file: tuning was not applied)"
        out.fail(f"{len(out.drift)} settings drifted{hint}")
    else:
        out.messages.append("all settings as desired")
    return out


def revert(env: Environment, state_path: Path) -> Outcome:
    out = Outcome("revert")
    st = load_state(env.host, state_path)
    if st is None:
        out.messages.append("nothing to revert (no state file)")
        return out
    settings: list[tuple[Entry, Setting]] = []
    for entry in st.entries:
        try:
            settings.append((entry, rebuild(env.host, entry)))
        except SettingError as exc:
            out.failed.append(str(exc))
    if not env.is_root:
        out.needs_root = [_label(s) for _, s in settings if s.needs_root]
        if out.needs_root:
            out.fail("not running as root: nothing changed; these settings need root")
            return out
    for entry, s in reversed(settings):
        try:
            s.revert(entry.original)
        except SettingGone as exc:
            out.messages.append(f"{_label(s)}: gone, nothing to restore ({exc})")
        except SettingError as exc:
            out.failed.append(str(exc))
            continue
        else:
            out.changed.append(_label(s))
        st.remove(entry.key)
    if out.failed:
        out.fail(f"{len(out.failed)} settings not restored; their originals stay in {state_path}")
        _save(env, state_path, st)
    else:
        statefile.remove(state_path, root=env.host.fs.root)
        out.messages.append(f"restored {len(out.changed)} settings")
    return out
