"""The daemon's numbers, kept in one Prometheus registry.

:class:`Metrics` owns a ``prometheus_client.CollectorRegistry``: counters for
requests (by door and result), errors (by code), audio produced, chunks and
stalls; histograms for the time to first audio and its parts; and, through a
collector the service core plugs in (:meth:`Metrics.watch`), gauges read live at
scrape time (queue depth, streams, connections, backend and playback state).
``GET /metrics`` exposes that registry as it is, and ``stats`` (protocol v1) reads
its counts from the same registry (:meth:`Metrics.snapshot`), so the two can never
disagree.  The only thing kept beside it is a window of recent observations per
latency (:class:`Distribution`) for the exact percentiles ``stats`` reports,
which histogram buckets cannot give.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from appliance.ops.memory import Collections
from appliance.ops.meter import PartCost

_TTFP_BUCKETS = (0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0)
_PART_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)
_RTF_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0)

COMPLETED = "completed"
CANCELLED = "cancelled"


class Distribution:
    """The last ``keep`` observations of one quantity, with percentiles.

    A preallocated ring of float64: memory is fixed from the first request, where
    a deque of Python floats would grow by ~32 bytes per observation until full.
    """

    def __init__(self, keep: int = 10000) -> None:
        self._ring = np.zeros(keep, dtype=np.float64)
        self.count = 0

    def add(self, value: float) -> None:
        self._ring[self.count % len(self._ring)] = value
        self.count += 1

    def values(self) -> npt.NDArray[np.float64]:
        return self._ring[: min(self.count, len(self._ring))]

    def summary(self, count: int | None = None) -> dict[str, Any]:
        """Percentiles of the window; ``count`` (all observations ever) when given."""
        arr = self.values()
        total = self.count if count is None else count
        if not arr.size:
            return {"count": total}
        p50, p90, p95, p99 = np.percentile(arr, [50, 90, 95, 99])
        return {
            "count": total,
            "p50": round(float(p50), 2),
            "p90": round(float(p90), 2),
            "p95": round(float(p95), 2),
            "p99": round(float(p99), 2),
            "max": round(float(arr.max()), 2),
        }


@dataclass
class LiveNumbers:
    """What the service core reports at scrape time (read, never counted here)."""

    queue_depth: int = 0
    streams: dict[str, int] = field(default_factory=dict)
    """Live streams by door."""
    live_stalls: int = 0
    """Stalls so far of the streams still live (finished ones are in ``ttsd_stalls_total``)."""
    connections: dict[str, int] = field(default_factory=dict)
    backend: dict[str, Any] = field(default_factory=dict)
    playback: dict[str, Any] | None = None
    """``Player.stats()`` plus its ``state``; None when playback is off."""
    health: str = "ok"
    serving: bool = True
    cpu_wait: float | None = None
    """Share of the threads' runnable time spent waiting for a CPU (appliance.ops.cpuwait)."""
    admission_limit: float | None = None
    """Admission's load limit in force (``admission_max_load``, shrunk beside other work)."""
    cpu_quota: float | None = None
    """The process's CPU quota in CPUs (appliance.ops.cpuquota), None without one."""
    model_runs: dict[str, PartCost] = field(default_factory=dict)
    """The model's runs so far by part (appliance.ops.meter): counters kept by the runtime."""


_MODEL_FAMILIES = (
    ("runs", "ttsd_model_runs", "Model runs by part"),
    ("cpu_s", "ttsd_model_cpu_seconds", "CPU seconds of the threads that ran the model, by part"),
    ("wall_s", "ttsd_model_wall_seconds", "Seconds the model's runs took, by part"),
    ("frames", "ttsd_model_frames", "Latent frames the model's runs covered, by part"),
)


def _model_families(runs: dict[str, PartCost]) -> Iterator[Metric]:
    """One counter family per field of :class:`PartCost`, labelled by part."""
    for key, name, doc in _MODEL_FAMILIES:
        family = CounterMetricFamily(name, doc, labels=["part"])
        for part, cost in sorted(runs.items()):
            family.add_metric([part], getattr(cost, key))
        yield family


class _CollectionsCollector:
    """The interpreter's collections (:class:`~appliance.ops.memory.Collections`) and the
    objects frozen: a collection holds every thread, a stall's possible cause."""

    def __init__(self, collections: Collections) -> None:
        self._collections = collections

    def collect(self) -> Iterator[Metric]:
        c = self._collections
        families = (
            (CounterMetricFamily, "ttsd_gc_collections", "Collections by generation", c.count),
            (
                CounterMetricFamily,
                "ttsd_gc_pause_seconds",
                "Seconds collections held the interpreter, by generation",
                c.seconds,
            ),
            (
                GaugeMetricFamily,
                "ttsd_gc_longest_pause_seconds",
                "The longest collection so far, by generation",
                c.longest,
            ),
        )
        for kind, name, doc, values in families:
            family = kind(name, doc, labels=["generation"])
            for g, value in enumerate(values):
                family.add_metric([str(g)], value)
            yield family
        yield GaugeMetricFamily(
            "ttsd_gc_frozen_objects",
            "Objects frozen after the start-up, which no collection walks",
            gc.get_freeze_count(),
        )


class _LiveCollector:
    """Gauges read from the service core at scrape time."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        m = self._metrics
        yield GaugeMetricFamily("ttsd_uptime_seconds", "Seconds since start", value=m.uptime_s())
        source = m.live
        if source is None:
            return
        live = source()
        yield GaugeMetricFamily(
            "ttsd_queue_depth", "Work items waiting for an inference worker", live.queue_depth
        )
        g = GaugeMetricFamily("ttsd_streams", "Live streams by door", labels=["frontend"])
        for name, n in sorted(live.streams.items()):
            g.add_metric([name], n)
        yield g
        yield GaugeMetricFamily(
            "ttsd_live_stream_stalls",
            "Client underruns so far of the streams still live",
            live.live_stalls,
        )
        g = GaugeMetricFamily("ttsd_connections", "Open connections by door", labels=["frontend"])
        for name, n in sorted(live.connections.items()):
            g.add_metric([name], n)
        yield g
        b = live.backend
        g = GaugeMetricFamily(
            "ttsd_backend_info", "The backend serving now (value 1)", labels=["backend", "gpu"]
        )
        g.add_metric([str(b.get("backend", "onnx-cpu")), str(b.get("gpu") or "none")], 1)
        yield g
        for key in ("failovers", "recoveries", "recovery_failures"):
            yield CounterMetricFamily(
                f"ttsd_backend_{key}", f"GPU backend {key.replace('_', ' ')}", int(b.get(key, 0))
            )
        g = GaugeMetricFamily(
            "ttsd_health", "Health status (1 for the current one)", labels=["status"]
        )
        for status in ("ok", "degraded", "failing"):
            g.add_metric([status], 1 if live.health == status else 0)
        yield g
        yield GaugeMetricFamily(
            "ttsd_serving", "1 while new requests are taken", 1 if live.serving else 0
        )
        if live.cpu_wait is not None:
            yield GaugeMetricFamily(
                "ttsd_cpu_wait_ratio",
                "Share of the daemon threads' runnable time spent waiting for a CPU",
                live.cpu_wait,
            )
        if live.admission_limit is not None:
            yield GaugeMetricFamily(
                "ttsd_admission_load_limit",
                "Share of the workers admission lets real-time streams claim now",
                live.admission_limit,
            )
        if live.cpu_quota is not None:
            yield GaugeMetricFamily(
                "ttsd_cpu_quota_cpus",
                "The CPU quota of the daemon's cgroup, in CPUs (read again every 10 s)",
                live.cpu_quota,
            )
        yield from _model_families(live.model_runs)
        p = live.playback
        if p is not None:
            yield CounterMetricFamily(
                "ttsd_playback_underruns", "Speaker underruns", int(p.get("underruns", 0))
            )
            g = GaugeMetricFamily(
                "ttsd_playback_state", "Speaker state (1 for the current one)", labels=["state"]
            )
            for state in ("ok", "starting", "degraded", "off"):
                g.add_metric([state], 1 if p.get("state") == state else 0)
            yield g


class Metrics:
    """Counters and histograms in one registry (:attr:`registry`), fed by the core."""

    def __init__(self, keep: int = 10000) -> None:
        self.started = time.monotonic()
        self.registry = CollectorRegistry()
        r = self.registry
        # The label ``frontend`` (and ``stats``' ``requests_by_frontend``) names the door a
        # request came through: an older word kept because scrapers and docs/http.md read
        # it; in the code "frontend" is the text pipeline and the door is a door.
        self._requests = Counter(
            "ttsd_requests",
            "Requests ended, by door and result",
            ["frontend", "result"],
            registry=r,
        )
        self._errors = Counter("ttsd_errors", "Errors by code", ["code"], registry=r)
        self._audio = Counter("ttsd_audio_seconds", "Seconds of audio produced", registry=r)
        self._chunks = Counter("ttsd_chunks", "Audio chunks produced", registry=r)
        self._stalls = Counter(
            "ttsd_stalls", "Client underruns of finished requests (late chunks)", registry=r
        )
        self._ttfp = Histogram(
            "ttsd_ttfp_seconds", "Time to first audio", buckets=_TTFP_BUCKETS, registry=r
        )
        self._parts = Histogram(
            "ttsd_ttfp_part_seconds",
            "Time to first audio by part (frontend, queue, encode, first_decode, write)",
            ["part"],
            buckets=_PART_BUCKETS,
            registry=r,
        )
        self._rtf = Histogram(
            "ttsd_rtf", "Compute time per second of audio", buckets=_RTF_BUCKETS, registry=r
        )
        # Windows for the exact percentiles of ``stats`` (not counts: those are above).
        self._keep = keep
        self.ttfp_ms = Distribution(keep)
        self.rtf = Distribution(keep)
        self.parts: dict[str, Distribution] = {}
        self.live: Callable[[], LiveNumbers] | None = None
        r.register(_LiveCollector(self))
        self.collections = Collections()
        """The interpreter's collections, counted once the daemon installs it at start."""
        r.register(_CollectionsCollector(self.collections))

    # ------------------------------------------------------------ what the core calls

    def request_done(self, stats: dict[str, Any], cancelled: bool, door: str = "") -> None:
        self._requests.labels(door or "unknown", CANCELLED if cancelled else COMPLETED).inc()
        self._audio.inc(max(0.0, float(stats.get("audio_ms") or 0)) / 1000.0)
        self._chunks.inc(max(0, int(stats.get("chunks") or 0)))
        self._stalls.inc(max(0, int(stats.get("stalls") or 0)))
        if stats.get("ttfp_ms") is not None:
            ttfp = float(stats["ttfp_ms"])
            self._ttfp.observe(ttfp / 1000.0)
            self.ttfp_ms.add(ttfp)
        if stats.get("rtf") is not None:
            self._rtf.observe(float(stats["rtf"]))
            self.rtf.add(float(stats["rtf"]))
        for name, value in (stats.get("ttfp_parts_ms") or {}).items():
            self._parts.labels(name).observe(float(value) / 1000.0)
            dist = self.parts.get(name)
            if dist is None:
                dist = self.parts[name] = Distribution(self._keep)
            dist.add(float(value))

    def error(self, code: str) -> None:
        self._errors.labels(code).inc()

    def watch(self, live: Callable[[], LiveNumbers]) -> None:
        """The service core's live numbers, read at every scrape (the latest caller wins)."""
        self.live = live

    # ------------------------------------------------------------ reading the registry

    def uptime_s(self) -> float:
        return time.monotonic() - self.started

    def _samples(self, names: Iterable[str]) -> dict[str, list[tuple[dict[str, str], float]]]:
        wanted = set(names)
        out: dict[str, list[tuple[dict[str, str], float]]] = {n: [] for n in wanted}
        for collector in (self._requests, self._errors, self._audio, self._chunks, self._stalls):
            for family in collector.collect():
                for s in family.samples:
                    if s.name in wanted:
                        out[s.name].append((s.labels, s.value))
        for hist in (self._ttfp, self._parts, self._rtf):
            for family in hist.collect():
                for s in family.samples:
                    if s.name in wanted:
                        out[s.name].append((s.labels, s.value))
        return out

    @property
    def errors(self) -> dict[str, int]:
        """Errors by code, from the registry."""
        return {
            labels["code"]: int(v)
            for labels, v in self._samples(["ttsd_errors_total"])["ttsd_errors_total"]
        }

    @property
    def counters(self) -> dict[str, int]:
        """``stats``' counters, from the registry."""
        s = self._samples(
            [
                "ttsd_requests_total",
                "ttsd_audio_seconds_total",
                "ttsd_chunks_total",
                "ttsd_stalls_total",
            ]
        )
        completed = sum(v for lb, v in s["ttsd_requests_total"] if lb["result"] == COMPLETED)
        cancelled = sum(v for lb, v in s["ttsd_requests_total"] if lb["result"] == CANCELLED)

        def one(name: str) -> float:
            return sum(v for _lb, v in s[name])

        return {
            "requests_completed": int(completed),
            "requests_cancelled": int(cancelled),
            "audio_ms": round(one("ttsd_audio_seconds_total") * 1000),
            "chunks": int(one("ttsd_chunks_total")),
            "stalls": int(one("ttsd_stalls_total")),
        }

    def served(self) -> int:
        c = self.counters
        return c["requests_completed"] + c["requests_cancelled"]

    def snapshot(self) -> dict[str, Any]:
        s = self._samples(
            [
                "ttsd_requests_total",
                "ttsd_ttfp_seconds_count",
                "ttsd_rtf_count",
                "ttsd_ttfp_part_seconds_count",
            ]
        )
        by_door: dict[str, int] = {}
        for labels, v in s["ttsd_requests_total"]:
            by_door[labels["frontend"]] = by_door.get(labels["frontend"], 0) + int(v)
        part_counts = {lb["part"]: int(v) for lb, v in s["ttsd_ttfp_part_seconds_count"]}
        ttfp_count = int(sum(v for _lb, v in s["ttsd_ttfp_seconds_count"]))
        rtf_count = int(sum(v for _lb, v in s["ttsd_rtf_count"]))
        return {
            "uptime_s": round(self.uptime_s(), 1),
            "counters": self.counters,
            "errors": self.errors,
            "requests_by_frontend": by_door,
            "ttfp_ms": self.ttfp_ms.summary(ttfp_count),
            "ttfp_parts_ms": {
                k: v.summary(part_counts.get(k, 0)) for k, v in sorted(self.parts.items())
            },
            "rtf": self.rtf.summary(rtf_count),
        }
