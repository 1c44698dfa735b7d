"""``ttsd tune plan|apply|verify|revert``.

Exit codes: 0 done (or nothing to do), 1 apply/revert failed, drift found, or
root needed; 2 bad arguments or config; 141 (quietly) when the reader of the output went
away (``ttsd tune plan --json | head``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from appliance.ops import nvml as nvml_seam
from appliance.ops.config import DEFAULT_CONFIG_PATH, ConfigError, TuningConfig, load_config
from appliance.ops.pipes import quiet_broken_pipe
from tuning import ops, services
from tuning import state as statefile
from tuning.plan import (
    CHANGE,
    INFO,
    NONE,
    NOT_APPLICABLE,
    OK,
    SKIP,
    WARN,
    Environment,
    Plan,
    PlanItem,
    build_plan,
)
from tuning.setting import Host
from tuning.sysfs import SysRoot, format_cpulist


def _euid_is_root() -> bool:
    return os.geteuid() == 0


@dataclass(frozen=True)
class Seams:
    """What tests replace: NVML, the root check, the file tree and the output stream."""

    nvml_loader: Callable[[], Any | None] = nvml_seam.load
    is_root: Callable[[], bool] = _euid_is_root
    root_factory: Callable[[str], SysRoot] = SysRoot
    out: TextIO | None = field(default=None)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ttsd tune",
        description="Show, apply, verify or revert the latency tuning of this machine.",
    )
    p.add_argument("command", choices=["plan", "apply", "verify", "revert"])
    p.add_argument("--root", help="prefix of every system path (default: tuning.root, /)")
    p.add_argument(
        "--state-file", help="originals file, inside the root (default: tuning.state_file)"
    )
    p.add_argument("--config", help=f"config file (default: {DEFAULT_CONFIG_PATH} if present)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--force", action="store_true", help="also change what tuned/power-profiles-daemon manage"
    )
    return p


def _load_tuning(args: argparse.Namespace) -> TuningConfig:
    if args.config is not None:
        return load_config(args.config).tuning
    # The default config is read inside the root too, so a fake tree is self-contained.
    default = SysRoot(args.root or "/").path(str(DEFAULT_CONFIG_PATH))
    return load_config(default).tuning if default.exists() else TuningConfig()


def main(argv: list[str], *, seams: Seams | None = None) -> int:
    return quiet_broken_pipe(lambda: _main(argv, seams or Seams()))


def _main(argv: list[str], seams: Seams) -> int:
    out = seams.out or sys.stdout
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:  # argparse reports usage errors (and --help) by exiting
        return exc.code if isinstance(exc.code, int) else 2
    try:
        cfg = _load_tuning(args)
    except ConfigError as exc:
        print(f"ttsd tune: {exc}", file=sys.stderr)
        return 2
    fs = seams.root_factory(args.root or cfg.root)
    env = Environment(
        host=Host(fs=fs, nvml=seams.nvml_loader()),
        is_root=seams.is_root(),
        running=services.running_services(fs),
    )
    state_path = fs.path(args.state_file or cfg.state_file)
    try:
        st = ops.load_state(env.host, state_path)
        if args.command == "revert":
            outcome = ops.revert(env, state_path)
            return _report(out, outcome, None, args.json)
        plan = build_plan(cfg, env, force=args.force, skipped=st.skipped if st else None)
        if args.command == "plan":
            if args.json:
                print(json.dumps(plan.to_json(), indent=1), file=out)
            else:
                print(render_plan(plan), file=out)
            return 0
        if args.command == "apply":
            return _report(out, ops.apply(plan, env, state_path), plan, args.json)
        return _report(out, ops.verify(plan, env, state_path), plan, args.json)
    except statefile.StateError as exc:
        print(f"ttsd tune: {exc}", file=sys.stderr)
        return 1


def _report(out: TextIO, outcome: ops.Outcome, plan: Plan | None, as_json: bool) -> int:
    if as_json:
        data = outcome.to_json()
        if plan is not None:
            data["plan"] = plan.to_json()
        print(json.dumps(data, indent=1), file=out)
        return 0 if outcome.ok else 1
    if plan is not None and outcome.command == "apply":
        print(render_plan(plan), file=out)
        print(file=out)
    for label in outcome.changed:
        print(f"{outcome.command}: {label}", file=out)
    for label, why in outcome.skipped.items():
        print(f"skipped: {label}: {why}", file=out)
    for text in outcome.drift:
        print(f"drift: {text}", file=out)
    for text in outcome.failed:
        print(f"failed: {text}", file=out)
    for label in outcome.needs_root:
        print(f"needs root: {label}", file=out)
    for text in outcome.messages:
        print(text, file=out)
    return 0 if outcome.ok else 1


_ACTION_WORDS = {
    CHANGE: "will change",
    NONE: "already set",
    SKIP: "skipped",
    NOT_APPLICABLE: "not applicable",
    OK: "ok",
    WARN: "WARNING",
    INFO: "info",
}
_NUMBERED = re.compile(r"^([a-z]+)(\d+)$")


def _merge(items: list[PlanItem]) -> list[tuple[str, PlanItem]]:
    """Fold runs of rows that differ only in a numbered target (cpu0..cpu7 → cpu0-7)."""
    rows: list[tuple[str, PlanItem, list[int]]] = []
    for item in items:
        m = _NUMBERED.match(item.target)
        if rows and m:
            target, prev, numbers = rows[-1]
            pm = _NUMBERED.match(prev.target)
            same = (prev.setting, prev.current, prev.desired, prev.action, prev.note) == (
                item.setting,
                item.current,
                item.desired,
                item.action,
                item.note,
            )
            if same and pm and pm.group(1) == m.group(1) and numbers:
                numbers.append(int(m.group(2)))
                continue
        rows.append((item.target, item, [int(m.group(2))] if m else []))
    merged = []
    for target, item, numbers in rows:
        if len(numbers) > 1:
            prefix = _NUMBERED.match(target)
            assert prefix is not None
            target = prefix.group(1) + format_cpulist(numbers)
        merged.append((target, item))
    return merged


def render_plan(plan: Plan) -> str:
    header = ("SETTING", "TARGET", "CURRENT → DESIRED", "ROOT", "NOTE")
    table = [header]
    for target, item in _merge(plan.items):
        if item.desired in ("-", item.current):
            change = item.current
        else:
            change = f"{item.current} → {item.desired}"
        note = _ACTION_WORDS.get(item.action, item.action)
        if item.note:
            note += f": {item.note}"
        table.append((item.setting, target, change, "yes" if item.needs_root else "no", note))
    widths = [max(len(row[i]) for row in table) for i in range(len(header) - 1)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1]
        for row in table
    ]
    lines.insert(0, f"root {plan.root}; {plan.gpu_note}")
    for w in plan.warnings:
        lines.append(f"warning: {w}")
    n = len(plan.changes())
    if n and not plan.is_root:
        lines.append(f"{n} settings to change; `ttsd tune apply` must run as root")
    elif n:
        lines.append(f"{n} settings to change with `ttsd tune apply`")
    else:
        lines.append("nothing to change")
    return "\n".join(lines)
