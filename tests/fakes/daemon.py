"""The real daemon with test seams put in (:class:`appliance.daemon.Seams`), as a program:

    python -m tests.fakes.daemon [--stall-first-item SECONDS] [--frontend-fault TEXT] serve …

- ``--stall-first-item``: the first work item of a request (not the start-up's warm-up)
  hangs its worker that long, so the tests see the systemd watchdog withheld while a
  worker is wedged.
- ``--frontend-fault``: text containing TEXT makes the frontend raise (a stand-in for a
  bug), so the tests see every door end such a request with ``internal``.

Everything else is ``ttsd``'s own command line; production code has no hook for these.
"""

from __future__ import annotations

import argparse
import functools
import logging
import sys
import time
from collections.abc import Callable
from typing import Any

from appliance.core.runtime import Runtime
from appliance.core.service import Service
from appliance.daemon import Seams
from appliance.main import main as ttsd_main
from appliance.text.frontend import Clause

log = logging.getLogger("ttsd")


def stall_first_item(seconds: float) -> Callable[[Runtime], None]:
    def seam(runtime: Runtime) -> None:
        scheduler = runtime.scheduler
        real_submit = scheduler.submit
        log.warning("test seam: the first work item will stall %.1f s", seconds)

        def stalled(fn: Callable[[], Any]) -> Any:
            time.sleep(seconds)
            return fn()

        def submit_once(fn: Callable[[], Any], **kw: Any) -> Any:
            if kw.get("kind") == "warmup":  # the start-up's own batch work: not a request's
                return real_submit(fn, **kw)
            setattr(scheduler, "submit", real_submit)  # noqa: B010 - one-shot wrapper undone
            return real_submit(functools.partial(stalled, fn), **kw)

        setattr(scheduler, "submit", submit_once)  # noqa: B010

    return seam


def frontend_fault(marker: str) -> Callable[[Service], None]:
    def seam(service: Service) -> None:
        real = service.text.frontend

        def frontend(text: str, *args: Any, **kwargs: Any) -> list[Clause]:
            if marker in text:
                raise RuntimeError(f"test seam: text contains {marker!r}")
            return real(text, *args, **kwargs)

        service.text.frontend = frontend

    return seam


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tests.fakes.daemon", add_help=False)
    parser.add_argument("--stall-first-item", type=float, default=None)
    parser.add_argument("--frontend-fault", default=None)
    ours, rest = parser.parse_known_args(argv)
    seams = Seams(
        runtime=stall_first_item(ours.stall_first_item) if ours.stall_first_item else None,
        service=frontend_fault(ours.frontend_fault) if ours.frontend_fault else None,
    )
    return ttsd_main(rest, seams)


if __name__ == "__main__":
    sys.exit(main())
