"""Latency distributions keep a fixed window of recent observations."""

from __future__ import annotations

import pytest

from appliance.ops.meter import PartCost
from appliance.ops.metrics import Distribution, LiveNumbers, Metrics


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


def _value(m: Metrics, name: str, labels: dict[str, str] | None = None) -> float | None:
    return m.registry.get_sample_value(name, labels or {})


def test_stats_and_the_registry_are_the_same_numbers() -> None:
    m = Metrics()
    m.request_done({"ttfp_ms": 40.0, "audio_ms": 1500.0, "chunks": 3, "stalls": 1}, False, "http")
    m.request_done({"ttfp_ms": 80.0, "audio_ms": 500.0, "chunks": 1}, True, "protocol-v1")
    m.error("busy")
    m.error("busy")
    m.error("bad_request")
    snap = m.snapshot()
    assert _value(m, "ttsd_requests_total", {"frontend": "http", "result": "completed"}) == 1
    assert _value(m, "ttsd_requests_total", {"frontend": "protocol-v1", "result": "cancelled"}) == 1
    assert snap["requests_by_frontend"] == {"http": 1, "protocol-v1": 1}
    assert _value(m, "ttsd_audio_seconds_total") == snap["counters"]["audio_ms"] / 1000 == 2.0
    assert _value(m, "ttsd_chunks_total") == snap["counters"]["chunks"] == 4
    assert _value(m, "ttsd_stalls_total") == snap["counters"]["stalls"] == 1
    assert _value(m, "ttsd_errors_total", {"code": "busy"}) == snap["errors"]["busy"] == 2
    assert snap["errors"] == {"busy": 2, "bad_request": 1}
    assert _value(m, "ttsd_ttfp_seconds_count") == snap["ttfp_ms"]["count"] == 2
    assert _value(m, "ttsd_ttfp_seconds_sum") == pytest.approx(0.12)
    assert _value(m, "ttsd_ttfp_seconds_bucket", {"le": "0.05"}) == 1
    assert snap["ttfp_ms"]["p50"] == 60.0


def test_live_numbers_are_read_at_scrape_time() -> None:
    m = Metrics()
    assert _value(m, "ttsd_queue_depth") is None  # no core attached: uptime only
    assert _value(m, "ttsd_uptime_seconds") is not None
    depth = [3]
    quota: list[float | None] = [1.5]

    def live() -> LiveNumbers:
        return LiveNumbers(
            queue_depth=depth[0],
            streams={"http": 2},
            connections={"http": 1, "protocol-v1": 4},
            backend={"backend": "onnx-cpu", "failovers": 2},
            playback={"underruns": 5, "state": "off"},
            health="degraded",
            serving=False,
            cpu_wait=0.25,
            admission_limit=0.31,
            cpu_quota=quota[0],
            model_runs={
                "decoder": PartCost(4, 0.5, 0.25, 256),
                "prior": PartCost(1, 0.1, 0.05, 80),
            },
        )

    m.watch(live)
    assert _value(m, "ttsd_queue_depth") == 3
    depth[0] = 0
    assert _value(m, "ttsd_queue_depth") == 0
    assert _value(m, "ttsd_streams", {"frontend": "http"}) == 2
    assert _value(m, "ttsd_connections", {"frontend": "protocol-v1"}) == 4
    assert _value(m, "ttsd_backend_failovers_total") == 2
    assert _value(m, "ttsd_backend_info", {"backend": "onnx-cpu", "gpu": "none"}) == 1
    assert _value(m, "ttsd_playback_underruns_total") == 5
    assert _value(m, "ttsd_playback_state", {"state": "off"}) == 1
    assert _value(m, "ttsd_health", {"status": "degraded"}) == 1
    assert _value(m, "ttsd_health", {"status": "ok"}) == 0
    assert _value(m, "ttsd_serving") == 0
    assert _value(m, "ttsd_cpu_wait_ratio") == 0.25
    assert _value(m, "ttsd_admission_load_limit") == 0.31
    assert _value(m, "ttsd_cpu_quota_cpus") == 1.5
    quota[0] = None
    assert _value(m, "ttsd_cpu_quota_cpus") is None  # no quota: no gauge
    decoder = {"part": "decoder"}
    assert _value(m, "ttsd_model_runs_total", decoder) == 4
    assert _value(m, "ttsd_model_wall_seconds_total", decoder) == 0.5
    assert _value(m, "ttsd_model_cpu_seconds_total", decoder) == 0.25
    assert _value(m, "ttsd_model_frames_total", decoder) == 256
    assert _value(m, "ttsd_model_frames_total", {"part": "prior"}) == 80


def test_exposition_parses() -> None:
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    m = Metrics()
    m.request_done({"ttfp_ms": 40.0, "ttfp_parts_ms": {"encode": 20.0}}, False, "http")
    m.watch(LiveNumbers)
    names = {f.name for f in text_string_to_metric_families(generate_latest(m.registry).decode())}
    assert {
        "ttsd_requests",
        "ttsd_ttfp_seconds",
        "ttsd_ttfp_part_seconds",
        "ttsd_queue_depth",
    } <= names
