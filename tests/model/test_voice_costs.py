"""A voice's costs kept beside its cut (appliance.model.voices.costs): what the next start
reads back, and what it never trusts."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from appliance.model.voices.costs import StoredCosts, read_costs, write_costs
from appliance.voicetypes import Voice

COSTS = StoredCosts(stream_cost=0.07, first_decode_s=0.009, prior_s_per_id=1.2e-4)


def _voice(slot: Path) -> Voice:
    """A voice whose cut lives in ``slot`` (only its paths matter here)."""
    from tests.fakes.voice import real_voice

    voice, _model = real_voice()
    return dataclasses.replace(voice, encoder_path=slot / "encoder.onnx")


def test_the_costs_a_start_kept_are_read_back_on_the_same_machine(tmp_path: Path) -> None:
    voice = _voice(tmp_path)
    assert read_costs(voice, "onnx-cpu") is None  # none kept yet
    write_costs(voice, "onnx-cpu", COSTS)
    assert read_costs(voice, "onnx-cpu") == COSTS
    assert read_costs(voice, "tensorrt") is None  # another backend measures its own


def test_costs_of_another_machine_or_out_of_range_or_garbage_are_ignored(
    tmp_path: Path,
) -> None:
    voice = _voice(tmp_path)
    write_costs(voice, "onnx-cpu", COSTS)
    path = tmp_path / "costs-onnx-cpu.json"
    kept = json.loads(path.read_text())
    for changed in (
        {"machine": "another CPU|64"},
        {"stream_cost": -1.0},
        {"stream_cost": float("nan")},
        {"first_decode_s": 1e9},
        {"prior_s_per_id": "fast"},
    ):
        path.write_text(json.dumps({**kept, **changed}))
        assert read_costs(voice, "onnx-cpu") is None, changed
    for garbage in (b"", b"[1, 2]", b"{", b"\xff\xfe"):
        path.write_bytes(garbage)
        assert read_costs(voice, "onnx-cpu") is None, garbage


def test_a_backend_name_never_makes_a_path_and_a_voice_without_a_cut_keeps_none(
    tmp_path: Path,
) -> None:
    voice = _voice(tmp_path)
    write_costs(voice, "../escape", COSTS)
    assert list(tmp_path.parent.glob("*escape*")) == [] and list(tmp_path.iterdir()) == []
    whole = dataclasses.replace(voice, encoder_path=None)
    write_costs(whole, "onnx-cpu", COSTS)
    assert read_costs(whole, "onnx-cpu") is None
