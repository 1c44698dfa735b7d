"""bench/drops: its three runs on the real daemon (a handful of short requests each)."""

from __future__ import annotations

from pathlib import Path

from bench import drops


def test_each_run_is_read_before_and_after_its_requests(tmp_path: Path) -> None:
    r = drops.drop_growth(tmp_path, requests=2, settle_s=0.2)
    n = drops.WARM_IN + 2
    assert r["finished"]["outcomes"] == {"end": n}
    assert r["dropped"]["outcomes"] == {"dropped": n}  # each left after its first chunk
    assert r["finished after"]["outcomes"] == {"end": n}
    for name in drops.RUNS:
        before, after = r[name]["kept_mb"]
        assert 100 < before < 1000 and 100 < after < 1000
        assert r[name]["per_100_mb"] == round((after - before) * 100 / 2, 2)
    table = drops.format_drops(r)
    assert "| 2 whose client leaves after the first chunk |" in table
    assert table.count("\n| 2 ") == 3
