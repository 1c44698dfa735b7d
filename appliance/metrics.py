"""Counters and latency distributions for ``stats``."""

from __future__ import annotations

import collections
import time
from typing import Any

import numpy as np
import numpy.typing as npt


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

    def summary(self) -> dict[str, Any]:
        arr = self.values()
        if not arr.size:
            return {"count": self.count}
        p50, p90, p95, p99 = np.percentile(arr, [50, 90, 95, 99])
        return {
            "count": self.count,
            "p50": round(float(p50), 2),
            "p90": round(float(p90), 2),
            "p95": round(float(p95), 2),
            "p99": round(float(p99), 2),
            "max": round(float(arr.max()), 2),
        }


class Metrics:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self.counters: collections.Counter[str] = collections.Counter()
        self.errors: collections.Counter[str] = collections.Counter()
        self.frontends: collections.Counter[str] = collections.Counter()
        """Requests served, by the front end they came through."""
        self.ttfp_ms = Distribution()
        self.rtf = Distribution()
        self.parts: dict[str, Distribution] = collections.defaultdict(Distribution)

    def request_done(self, stats: dict[str, Any], cancelled: bool, frontend: str = "") -> None:
        self.counters["requests_cancelled" if cancelled else "requests_completed"] += 1
        if frontend:
            self.frontends[frontend] += 1
        self.counters["audio_ms"] += int(stats.get("audio_ms") or 0)
        self.counters["chunks"] += int(stats.get("chunks") or 0)
        self.counters["stalls"] += int(stats.get("stalls") or 0)
        if stats.get("ttfp_ms") is not None:
            self.ttfp_ms.add(float(stats["ttfp_ms"]))
        if stats.get("rtf") is not None:
            self.rtf.add(float(stats["rtf"]))
        for name, value in (stats.get("ttfp_parts_ms") or {}).items():
            self.parts[name].add(float(value))

    def error(self, code: str) -> None:
        self.errors[code] += 1

    def uptime_s(self) -> float:
        return time.monotonic() - self.started

    def snapshot(self) -> dict[str, Any]:
        return {
            "uptime_s": round(self.uptime_s(), 1),
            "counters": dict(self.counters),
            "errors": dict(self.errors),
            "requests_by_frontend": dict(self.frontends),
            "ttfp_ms": self.ttfp_ms.summary(),
            "ttfp_parts_ms": {k: v.summary() for k, v in self.parts.items()},
            "rtf": self.rtf.summary(),
        }
