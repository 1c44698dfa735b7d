"""The 2-D decoder kept in ONNX Runtime's blocked layout: made for this machine, checked
against ONNX Runtime's own graph, kept in the voice's cache (appliance.model.engine.blocked)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

from appliance.model.engine import blocked
from appliance.model.engine.base import Window
from appliance.model.engine.sessions import open_session
from tests.fakes.voice import flow_voice, latent


def test_the_daemons_2d_decoder_runs_blocked_and_decodes_as_onnx_runtime_would(
    voice_cache: Path,
) -> None:
    """On what `Runtime.load` builds: the decoder for windows ahead runs its element-wise
    operators in the blocked layout and its residual sums in its convolutions
    (appliance.model.nchwc), within 1e-6 of what the graph as ONNX Runtime optimises it
    gives."""
    from appliance.core.runtime import Runtime
    from appliance.model.engine.onnx import OnnxVoiceModel
    from appliance.ops.config import parse_config

    cfg = parse_config(
        {"voices": {"cache_dir": str(voice_cache)}, "engine": {"backend": "onnx-cpu"}}
    )
    rt = Runtime.load(cfg, warm=False)
    try:
        model = rt.voices[rt.default_voice].model
        assert isinstance(model, OnnxVoiceModel)
        assert model.lean_layout.startswith("blocked (")
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
        assert 0 < float(np.max(np.abs(got - want))) <= blocked.SAME_WITHIN
    finally:
        rt.close()


def test_a_blocked_graph_that_decodes_otherwise_is_not_used(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The check when the graph is made compares samples: a rewrite that changed one number
    is left out, and not kept.  A good one is kept for the next load, which uses it as is."""
    import shutil

    from appliance.model.nchwc import keep_blocked

    def off_by_a_little(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
        blocked, saved = keep_blocked(model)
        relu = next(n for n in blocked.graph.node if n.op_type == "LeakyRelu")
        next(a for a in relu.attribute if a.name == "alpha").f = 0.1001
        return blocked, saved

    voice, _ = flow_voice()
    assert voice.lean_decoder_path is not None and voice.cut is not None
    lean = tmp_path / "decoder2d.onnx"
    shutil.copy(voice.lean_decoder_path, lean)
    monkeypatch.setattr(blocked, "keep_blocked", off_by_a_little)
    _, layout = blocked.blocked_lean(lean, voice.cut)
    assert layout == "as optimised (the blocked graph's samples differ)"
    assert not list(tmp_path.glob("decoder2d.blocked-*"))
    monkeypatch.undo()
    made, layout = blocked.blocked_lean(lean, voice.cut)
    assert layout.startswith("blocked (") and "fewer per run" in layout
    (kept,) = tmp_path.glob("decoder2d.blocked-*.onnx")
    again, layout = blocked.blocked_lean(lean, voice.cut)
    assert layout == "blocked (made here before)"
    probe = blocked.probe_feeds(made, voice.cut, 30)
    assert np.array_equal(made.run(None, probe)[0], again.run(None, probe)[0])
    kept.write_bytes(b"not a graph")  # damaged: made again, and kept again
    _, layout = blocked.blocked_lean(lean, voice.cut)
    assert "fewer per run" in layout and kept.stat().st_size > 1_000_000
