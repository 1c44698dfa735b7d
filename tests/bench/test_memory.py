"""bench/memory and bench/memprobe: the memory bench's measures give the rows they promise,
with plausible figures, on the real daemon and the real voice (a handful of requests)."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.model.engine.threads import cpu_threads
from appliance.ops.config import parse_config
from bench import memory
from bench.memprobe import IMPORT_GROUPS, OFF_DOORS

IDLE_RSS_BOUND_MB = 250


def test_the_daemon_from_outside_over_a_handful_of_mixed_requests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory, "DROP_EVERY", 5)  # two of the ten drop their connection
    quiet: list[int] = []
    waits = memory._wait_quiet

    def wait_quiet(sock: str, timeout_s: float = 30.0) -> None:
        waits(sock, timeout_s)
        quiet.append(len(quiet))

    monkeypatch.setattr(memory, "_wait_quiet", wait_quiet)
    d = memory.daemon_memory(tmp_path, requests=10, growth=10, settle_s=0.2)
    assert d["outcomes"] == {"end": 8, "dropped": 2}  # every kind of MIX was served
    idle = d["rows"][0][1]
    assert 100 < idle["rss_mb"] < 1000 and 0 < idle["anon_mb"] < idle["rss_mb"]
    # Idle after the whole warm-up and after the mix (sentence-mode windows of 256 frames
    # among them): ~195 MB each; 268 and ~275 MB while ONNX Runtime's arenas kept the
    # largest runs' buffers for good (issue 46).  A generous bound: a regression fails it.
    assert idle["rss_mb"] < IDLE_RSS_BOUND_MB
    assert d["rows"][1][1]["rss_mb"] < IDLE_RSS_BOUND_MB
    # Each mark read once the daemon was quiet, at rest and again after the settle.
    assert [k for k, _ in d["samples"]] == [k for k, _ in d["kept"]] == [1, *range(2, 11)]
    assert len(quiet) == 10
    assert all(100 < rss < 1000 for _, rss in d["samples"] + d["kept"])
    assert d["after_requests_mb"] == d["samples"][-1][1]
    assert d["after_requests_kept_mb"] == d["kept"][-1][1]
    assert d["growth_mb"] == round(d["kept"][-1][1] - d["kept"][0][1], 1)
    assert abs(d["growth_fit_mb"]) < 1000
    assert memory.fitted_growth([(1, 100.0), (11, 101.0), (21, 102.0)], 1000) == pytest.approx(100)
    assert d["peak_mb"] >= max(rss for _, rss in d["samples"])
    table = memory.format_outside([d], [])
    for row in ("idle after warm-up", "after 10 mixed requests", "growth over 10 requests"):
        assert f"| {row}" in table


def test_the_probe_charges_each_step_in_the_daemons_order() -> None:
    probe = memory.run_probe("daemon", passes=1)
    stages = [s["stage"] for s in probe["stages"]]
    imports = [label for label, _ in IMPORT_GROUPS]
    assert stages[0] == "interpreter (python -m)"
    assert stages[1 : 1 + len(imports)] == imports
    # The daemon's defaults on this box: the 1-D decoder only where a worker has threads
    # to spread it over (not with two workers on 2 CPUs).
    threads = cpu_threads(parse_config({}))
    one_d = ["decoder_margins.onnx"] if threads > 1 else []
    sessions = ["decoder2d.onnx", *one_d, "prior.onnx", "flow.onnx"]
    assert [s.split()[2] for s in stages if s.startswith("ONNX session")] == sessions
    assert stages[-len(OFF_DOORS) :] == [label for label, _ in OFF_DOORS]
    rss = [s["rss_mb"] for s in probe["stages"]]
    assert 5 < rss[0] < 40
    added = {stage: rss[i + 1] - rss[i] for i, stage in enumerate(stages[1:])}
    prior = f"ONNX session prior.onnx ({threads} thread{'s' * (threads > 1)})"
    assert added["onnxruntime"] > 5 and added[prior] > 20
    assert 150 < memory.warm_rss(probe) < 600 and probe["peak_mb"] >= memory.warm_rss(probe)
    assert probe["cpu_per_audio_s"] > 0
    table = memory.format_inside(probe)
    assert table.count("\n| ") == len(stages) and "| onnxruntime |" in table


def test_a_candidate_cut_changes_what_the_probe_loads() -> None:
    cut = memory.run_probe("no_2d_decoder", passes=1)
    sessions = [s["stage"].split()[2] for s in cut["stages"] if s["stage"].startswith("ONNX")]
    assert sessions == ["decoder_margins.onnx", "prior.onnx", "flow.onnx"]
    assert cut["variant"] == "no_2d_decoder"
    assert "| no_2d_decoder |" in memory.format_cuts(cut, [cut])


def test_candidates_are_a_variant_and_glibcs_mmap_threshold() -> None:
    assert memory._spec("arena_off") == ("arena_off", {})
    assert memory._spec("daemon+mmap64") == ("daemon", {"MALLOC_MMAP_THRESHOLD_": "65536"})
    assert memory._spec("daemon+arenas2") == ("daemon", {"MALLOC_ARENA_MAX": "2"})
    for bad in ("no_such_cut", "arena_off+mmap", "arena_off+huge", "daemon+arenas"):
        with pytest.raises(ValueError):
            memory._spec(bad)
