"""Cache files written whole or not at all (appliance.ops.atomic): what a daemon stopped
in the middle of a write leaves behind, and what a killed one left."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from appliance.ops import atomic


def test_a_finished_write_replaces_the_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    dest = tmp_path / "meta.json"
    dest.write_bytes(b"old")
    atomic.write_bytes(dest, b"new")
    assert dest.read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["meta.json"]


def test_a_failed_write_leaves_the_old_file(tmp_path: Path) -> None:
    dest = tmp_path / "encoder.onnx"
    dest.write_bytes(b"old")
    try:
        with atomic.writing(dest) as f:
            f.write(b"half")
            raise OSError("disk full")
    except OSError:
        pass
    assert dest.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["encoder.onnx"]


def test_abandon_removes_a_write_under_way_and_refuses_new_ones(tmp_path: Path) -> None:
    """In a process of its own: abandon is for good (the process is about to exit)."""
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from appliance.ops import atomic
        d = Path({str(tmp_path)!r})
        with atomic.writing(d / "encoder.onnx") as f:
            f.write(b"half a graph")
            atomic.abandon()  # Ctrl-C: the main thread, while another writes
            f.write(b" and the rest")
        """
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert run.returncode != 0 and "FileNotFoundError" in run.stderr, run.stderr
    assert list(tmp_path.iterdir()) == []  # neither the graph nor a temporary file
    script = "from pathlib import Path\nfrom appliance.ops import atomic\natomic.abandon()\n"
    script += f"atomic.write_bytes(Path({str(tmp_path)!r}) / 'meta.json', b'x')\n"
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert "Abandoned" in run.stderr and list(tmp_path.iterdir()) == []


def test_sweep_removes_what_dead_writers_left_not_live_ones(tmp_path: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    left = tmp_path / f".encoder.onnx.{int(dead.stdout)}.0123abcd.tmp"
    mine = tmp_path / f".decoder.onnx.{os.getpid()}.0123abcd.tmp"
    other = tmp_path / "decoder.onnx"
    for p in (left, mine, other):
        p.write_bytes(b"x")
    assert atomic.sweep(tmp_path) == [left]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([mine.name, other.name])
