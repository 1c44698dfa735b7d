"""Subprocess side of the tuning tests (a fresh process, like systemd's Exec lines).

tuning_driver.py cli ROOT ARGS...       ttsd tune ARGS --root ROOT with the fake NVML
tuning_driver.py apply-and-hang ROOT    apply, say "applied", wait to be killed
tuning_driver.py bind ROOT              bind_self as ttsd serve does, start threads,
                                        print each thread's affinity and memory policy
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tuning_fakes import FakeNvml, FaultyRoot

from appliance.ops.config import TuningConfig
from tuning.cli import Seams, main
from tuning.numa import bind_self, get_mempolicy


def _seams(root: str) -> Seams:
    nvml = FakeNvml(Path(root) / "fake-nvml.json")
    if os.environ.get("TUNING_DRIVER_REAL_EUID") == "1":
        return Seams(nvml_loader=lambda: nvml, root_factory=FaultyRoot)
    # Acting as the root-run ExecStartPre/ExecStopPost, whoever runs the tests.
    return Seams(nvml_loader=lambda: nvml, root_factory=FaultyRoot, is_root=lambda: True)


def _thread_report(results: dict[str, object], ready: threading.Event) -> None:
    mode, nodes = get_mempolicy()
    results[threading.current_thread().name] = {
        "affinity": sorted(os.sched_getaffinity(0)),
        "mempolicy": [mode, sorted(nodes)],
    }
    ready.wait(10)


def bind(root: str) -> int:
    cfg = TuningConfig(root=root, numa_bind=True)
    result = bind_self(cfg, FakeNvml(Path(root) / "fake-nvml.json"))
    # What a daemon does next: thread pools, started after the binding.
    results: dict[str, object] = {}
    ready = threading.Event()
    threads = [
        threading.Thread(target=_thread_report, args=(results, ready), name=f"worker{i}")
        for i in range(3)
    ]
    for t in threads:
        t.start()
    while len(results) < len(threads):
        time.sleep(0.01)
    tasks = {}
    for status in Path("/proc/self/task").glob("*/status"):
        for line in status.read_text().splitlines():
            if line.startswith("Cpus_allowed_list:"):
                tasks[status.parent.name] = line.split(":", 1)[1].strip()
    ready.set()
    for t in threads:
        t.join()
    report = {"describe": result.describe(), "applied": result.applied, "threads": results}
    report["tasks"] = tasks
    print(json.dumps(report))
    return 0


def main_(argv: list[str]) -> int:
    what, root, *rest = argv
    if what == "cli":
        return main([*rest, "--root", root], seams=_seams(root))
    if what == "apply-and-hang":
        rc = main(["apply", "--root", root], seams=_seams(root))
        print(f"applied rc={rc}", flush=True)
        time.sleep(60)
        return 3
    if what == "bind":
        return bind(root)
    raise ValueError(what)


if __name__ == "__main__":
    raise SystemExit(main_(sys.argv[1:]))
