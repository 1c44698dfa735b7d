"""Commands whose reader has gone: quiet, status 141, as a C tool that SIGPIPE ended."""

from __future__ import annotations

import os
import subprocess
import sys

from appliance.ops.pipes import BROKEN_PIPE_STATUS


def _with_stdout_closed(*args: str) -> subprocess.CompletedProcess[bytes]:
    """Run with standard output a pipe whose reader is already gone (``| head -0``)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [sys.executable, *args], stdout=write, stderr=subprocess.PIPE, timeout=120
        )
    finally:
        os.close(write)


def test_ttsd_tune_json_into_a_closed_pipe_is_quiet() -> None:
    """`ttsd tune plan --json | head` printed a BrokenPipeError traceback."""
    r = _with_stdout_closed("-m", "appliance.main", "tune", "plan", "--json")
    assert r.stderr == b"", r.stderr.decode()
    assert r.returncode == BROKEN_PIPE_STATUS == 141
