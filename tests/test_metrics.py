"""Latency distributions keep a fixed window of recent observations."""

from __future__ import annotations

from appliance.metrics import Distribution, Metrics


def test_empty_distribution_reports_only_the_count() -> None:
    assert Distribution(keep=4).summary() == {"count": 0}


def test_percentiles_cover_the_last_keep_observations_only() -> None:
    d = Distribution(keep=4)
    for v in (1000.0, 1000.0, 1.0, 2.0, 3.0, 4.0):
        d.add(v)
    s = d.summary()
    assert s["count"] == 6
    assert sorted(d.values().tolist()) == [1.0, 2.0, 3.0, 4.0]
    assert s["max"] == 4.0
    assert s["p50"] == 2.5


def test_memory_is_fixed_from_the_start() -> None:
    d = Distribution(keep=100)
    before = d.values().base.nbytes if d.values().base is not None else 0
    for i in range(1000):
        d.add(float(i))
    assert d.values().base is not None and d.values().base.nbytes == before == 800


def test_request_done_feeds_counters_and_parts() -> None:
    m = Metrics()
    m.request_done(
        {"ttfp_ms": 40.0, "rtf": 0.1, "chunks": 3, "ttfp_parts_ms": {"encode": 20}}, False
    )
    m.request_done({"ttfp_ms": 60.0, "chunks": 1}, True)
    snap = m.snapshot()
    assert snap["counters"]["requests_completed"] == 1
    assert snap["counters"]["requests_cancelled"] == 1
    assert snap["counters"]["chunks"] == 4
    assert snap["ttfp_ms"]["p50"] == 50.0
    assert snap["ttfp_parts_ms"]["encode"]["count"] == 1
