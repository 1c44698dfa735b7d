from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

# The fakes are plain modules beside this file; make them importable whatever
# pytest's import mode is (and in the subprocesses the tests start).
HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from tuning_fakes import FakeNvml, FaultyRoot, RunCli, build_tree  # noqa: E402

from tuning.cli import Seams, main  # noqa: E402


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    return build_tree(tmp_path / "root")


@pytest.fixture
def nvml(tree: Path) -> FakeNvml:
    return FakeNvml.create(tree / "fake-nvml.json")


@pytest.fixture
def run_cli(tree: Path, nvml: FakeNvml) -> RunCli:
    """``ttsd tune ARGS --root tree`` in-process, with the fake NVML and the managed IRQ."""

    def run(
        *args: str,
        is_root: bool = True,
        gpu: bool = True,
        faults: dict[str, int] | None = None,
    ) -> tuple[int, str]:
        out = io.StringIO()
        seams = Seams(
            nvml_loader=lambda: nvml if gpu else None,
            is_root=lambda: is_root,
            root_factory=lambda root: FaultyRoot(root, faults),
            out=out,
        )
        rc = main([*args, "--root", str(tree)], seams=seams)
        return rc, out.getvalue()

    return run
