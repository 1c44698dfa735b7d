"""What a load balancer reads: whether this box takes new work now, and how much of it.

One answer in three states (docs/scale-out.md), computed on demand from the live
registry and admission's projection (nothing is kept; O(streams) per call):

- **ready** — admission would take one more real-time stream now.  ``weight_pct`` is the
  share of the box's stream capacity still free (1–100): the streams it can hold at the
  measured cost (``admission_max_load × workers / rtf``, the limit shrunk beside other work
  as admission shrinks it; at most ``limits.max_streams``)
  less those producing.  ``max_streams`` is that capacity, whole streams, at least 1.
- **drain** — no new work, in-flight streams stay: the daemon is starting (requests
  would wait for the warm-up), stopping (SIGTERM's drain notice, then the stop), or admission
  would refuse a newcomer (``busy``), or ``limits.max_streams`` is reached.
- **down** — nothing can serve: the inference workers stopped beating (health
  ``failing``).

Asking counts nothing: :meth:`Admission.judge` is the decision without its counters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from appliance.core.admission import producing
from appliance.core.service import Service

State = Literal["ready", "drain", "down"]


@dataclass(frozen=True)
class Capacity:
    state: State
    weight_pct: int = 0
    max_streams: int = 0
    reason: str = ""

    def agent_line(self) -> str:
        """HAProxy's agent-check answer: one ASCII line.  ``ready`` and ``up`` undo what an
        earlier ``drain`` or ``down`` did (only the agent may revert its own actions)."""
        if self.state == "ready":
            return f"up ready {self.weight_pct}% maxconn:{self.max_streams}\n"
        if self.state == "drain":
            return "up drain\n"
        return f"down#{_ascii_word(self.reason)}\n"

    def to_dict(self) -> dict[str, object]:
        return {
            "state": self.state,
            "weight_pct": self.weight_pct,
            "max_streams": self.max_streams,
            "reason": self.reason,
        }


def capacity_of(service: Service) -> Capacity:
    """The box's answer to a balancer now (see the module)."""
    health = service.health()
    if health["status"] == "failing":
        return Capacity("down", reason="workers stalled")
    if service.draining or service.stopping:
        return Capacity("drain", reason="stopping")
    if health["starting"]:
        return Capacity("drain", reason="starting")
    rt = service.runtime
    cap_streams = rt.config.limits.max_streams
    if len(service.streams) >= cap_streams:
        return Capacity("drain", reason=f"{cap_streams} requests in flight")
    cfg = rt.config.scheduler
    streams = service.stream_loads()
    decision = service.admission.judge(cfg, streams, service.admission_pressure())
    if not decision.admit:
        return Capacity("drain", reason=decision.reason)
    rtf = service.admission.rtf(streams)
    workers = service.admission.workers
    held = decision.limit * workers / rtf if rtf > 0 else float(cap_streams)
    held = min(held, float(cap_streams))
    free = max(0.0, held - producing(streams))
    weight = max(1, min(100, round(100.0 * free / held))) if held > 0 else 1
    return Capacity("ready", weight, max(1, math.floor(held)), "")


def _ascii_word(text: str) -> str:
    """A reason HAProxy shows on its stats page: printable ASCII, no line breaks."""
    cleaned = "".join(c if 32 < ord(c) < 127 else "_" for c in text)
    return cleaned[:64] or "failing"
