"""The 2-D decoder kept in ONNX Runtime's blocked layout: made for this machine, checked
against ONNX Runtime's own graph, kept in the voice's cache (appliance.model.engine.blocked)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnx
import pytest

from appliance.model.engine import blocked
from appliance.model.engine.base import Window
from appliance.model.engine.sessions import open_session
from appliance.voicetypes import CutNames
from tests.fakes.voice import flow_voice, latent


def test_the_daemons_2d_decoder_runs_blocked_and_decodes_as_onnx_runtime_would(
    voice_cache: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """On what `Runtime.load` builds: the decoder for windows ahead runs its element-wise
    operators in the blocked layout and its residual sums in its convolutions
    (appliance.model.nchwc), within 1e-6 of what the graph as ONNX Runtime optimises it
    gives; the voice's load line says so."""
    from appliance.core.runtime import Runtime
    from appliance.model.engine.onnx import OnnxVoiceModel
    from appliance.ops.config import parse_config

    cfg = parse_config(
        {"voices": {"cache_dir": str(voice_cache)}, "engine": {"backend": "onnx-cpu"}}
    )
    with caplog.at_level(logging.INFO):
        rt = Runtime.load(cfg, warm=False)
    try:
        model = rt.voices[rt.default_voice].model
        assert isinstance(model, OnnxVoiceModel)
        assert model.lean_layout.startswith("blocked (")
        (line,) = [r.getMessage() for r in caplog.records if " loaded in " in r.getMessage()]
        assert line.endswith(f", 2-D decoder {model.lean_layout})"), line
        source = rt.voices[rt.default_voice].source
        assert source.lean_decoder_path is not None
        # Made by this load or an earlier one: the graph kept for this machine sums in its
        # convolutions, three resblocks of three dilated pairs at each of two upsamplings.
        (kept,) = source.lean_decoder_path.parent.glob("decoder2d.blocked-*.onnx")
        nodes = onnx.load(str(kept)).graph.node
        assert sum(n.op_type == "Conv" and len(n.input) == 4 for n in nodes) >= 18
        plain = OnnxVoiceModel(
            source.model_path,
            None,
            None,
            source.cut,
            1,
            lean=open_session(source.lean_decoder_path, 1),
        )
        window = Window(latent(84), None, (10, 10))
        got, want = model.decode(window), plain.decode(window)
        assert float(np.max(np.abs(got - want))) <= blocked.SAME_WITHIN
    finally:
        rt.close()


def test_a_blocked_graph_that_decodes_otherwise_is_not_made(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The check when the graph is made compares samples: a rewrite that changed one
    number is refused, and leaves no file."""
    from appliance.model.nchwc import keep_blocked

    def off_by_a_little(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
        made, saved = keep_blocked(model)
        relu = next(n for n in made.graph.node if n.op_type == "LeakyRelu")
        next(a for a in relu.attribute if a.name == "alpha").f = 0.1001
        return made, saved

    voice, _ = flow_voice()
    assert voice.lean_decoder_path is not None and voice.cut is not None
    monkeypatch.setattr(blocked, "keep_blocked", off_by_a_little)
    out = tmp_path / "blocked.onnx"
    with pytest.raises(blocked.NotBlocked, match=r"^the blocked graph's samples differ$"):
        blocked.make(voice.lean_decoder_path, voice.cut, out)
    assert not out.exists()


def _lean_copy(tmp_path: Path) -> tuple[Path, CutNames]:
    import shutil

    voice, _ = flow_voice()
    assert voice.lean_decoder_path is not None and voice.cut is not None
    lean = tmp_path / "decoder2d.onnx"
    shutil.copy(voice.lean_decoder_path, lean)
    return lean, voice.cut


def test_the_graph_made_in_a_child_is_kept_and_used_as_is(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Made by a child process, checked there, kept for the next load, which uses it as
    is; a damaged kept file is made again.  The child finds the checkout this process
    runs from whatever the working directory (the daemon's is not the checkout)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    lean, cut = _lean_copy(tmp_path)
    made, layout = blocked.blocked_lean(lean, cut)
    assert layout.startswith("blocked (") and "fewer per run" in layout and "folded" in layout
    (kept,) = tmp_path.glob("decoder2d.blocked-*.onnx")
    again, layout = blocked.blocked_lean(lean, cut)
    assert layout == "blocked (made here before)"
    probe = blocked.probe_feeds(made, cut, 30)
    assert np.array_equal(made.run(None, probe)[0], again.run(None, probe)[0])
    kept.write_bytes(b"not a graph")  # damaged: made again, and kept again
    _, layout = blocked.blocked_lean(lean, cut)
    assert "fewer per run" in layout and kept.stat().st_size > 1_000_000


def test_what_the_child_cannot_make_runs_as_optimised_and_says_why(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A graph the rewrite refuses (a 1-D decoder: no blocked convolutions), and a child
    that does not finish in time: the graph as ONNX Runtime optimises it runs, nothing is
    kept, and the layout says why."""
    from tests.fakes.graphs import toy_decoder

    toy = tmp_path / "toy.onnx"
    onnx.save(toy_decoder(), str(toy))
    _, cut = _lean_copy(tmp_path)
    session, layout = blocked.blocked_lean(toy, cut)
    assert layout == "as optimised (no layout conversion to save)"
    assert [i.name for i in session.get_inputs()] == [i.name for i in toy_decoder().graph.input]
    monkeypatch.setattr(blocked, "MAKE_TIMEOUT_S", 0.01)
    (tmp_path / "slow").mkdir()
    lean, cut = _lean_copy(tmp_path / "slow")
    _, layout = blocked.blocked_lean(lean, cut)
    assert layout == "as optimised (not made within 0.01 s)"
    assert not list(tmp_path.rglob("*.blocked-*"))


def _ended(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")  # a zombie nobody reaped yet


def test_the_child_ends_with_the_process_that_started_it(tmp_path: Path) -> None:
    """A daemon stopped during its start leaves no child making the graph into a
    directory nobody will remove: started by a process that ends at once, the child ends
    too, and writes nothing."""
    import dataclasses
    import json
    import subprocess
    import sys
    import time

    lean, cut = _lean_copy(tmp_path)
    out = tmp_path / "made.onnx"
    starter = (
        "import os, subprocess, sys\n"
        "cmd = [sys.executable, '-m', 'appliance.model.engine.make_blocked', str(os.getpid()),"
        " *sys.argv[1:]]\n"
        "print(subprocess.Popen(cmd).pid, flush=True)\n"
        "os._exit(0)\n"
    )
    args = [str(lean), str(out), json.dumps(dataclasses.asdict(cut))]
    done = subprocess.run(
        [sys.executable, "-c", starter, *args],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parents[3],
    )
    child = int(done.stdout.split()[0])
    deadline = time.monotonic() + 60
    while not _ended(child):
        assert time.monotonic() < deadline, "the child outlived its parent by a minute"
        time.sleep(0.05)
    time.sleep(0.5)
    assert not out.exists()
