"""The voices a running daemon serves, brought in line with ``voices_dir`` on SIGHUP.

Lifecycle: :func:`scan` runs in a worker (it reads the directory and loads, cuts and
warms each new voice: seconds, and a minute for a first cut); :func:`apply` runs on the
event loop and makes the runtime with the new set (the reload swaps it in whole), so a
request resolves its voice against the old set or the new one, never half of each.  A
voice whose file went away is no longer offered to new requests; a request already
speaking with it keeps its sessions (they are freed with it).  The default voice is never
dropped.  Bounds: one scan at a time (the daemon's reloads run one after another); files
that fail are listed in ``Runtime.skipped`` with the reason and tried again on the next
SIGHUP, logged once (again only when the reason changes).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field

from appliance.core.runtime import Runtime, load_one, log_skipped
from appliance.core.streaming import VoiceRuntime
from appliance.model.engine.threads import cpu_plan
from appliance.model.voices import discover
from appliance.ops.cpuquota import cpu_quota
from appliance.ops.logsetup import one_line
from appliance.ops.paths import default_cache_dir

log = logging.getLogger("ttsd")


@dataclass
class VoiceChanges:
    """What a scan found: voices loaded and warm, names gone, files that failed."""

    added: dict[str, VoiceRuntime] = field(default_factory=dict)
    removed: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.added or self.removed)


def scan(rt: Runtime) -> VoiceChanges:
    """Discover again and load what is new (slow: in a worker, never on the loop)."""
    changes = VoiceChanges()
    found = discover(rt.config.voices.voices_dir, changes.skipped)
    cache = rt.cache_dir or default_cache_dir()
    plan = rt.plan or cpu_plan(rt.config, cpu_quota(), pin=False)
    changes.removed = [n for n in rt.voices if n not in found and n != rt.default_voice]
    for name, path in found.items():
        known = rt.voices.get(name)
        if known is not None and known.source.model_path == path:
            continue
        try:
            voice, _status = load_one(name, path, cache, rt.config, plan, rt.meter)
            rt.warm_voice(voice)
        except Exception as exc:  # a foreign file: protobuf, onnxruntime, JSON errors …
            changes.skipped[str(path)] = one_line(exc)
            continue
        changes.added[name] = voice
    log_skipped(changes.skipped, rt.skipped)
    return changes


def apply(rt: Runtime, changes: VoiceChanges) -> Runtime:
    """``rt`` with the new set (on the loop; the caller swaps it in: one step between two
    requests)."""
    voices = {n: v for n, v in rt.voices.items() if n not in changes.removed}
    voices.update(changes.added)
    for name in changes.removed:
        log.info("voice %s removed (its file is gone)", name)
    for name in changes.added:
        log.info("voice %s added", name)
    if not changes:
        skipped = f", {len(changes.skipped)} file(s) skipped" if changes.skipped else ""
        log.info("voices: no change (%d served%s)", len(voices), skipped)
    return dataclasses.replace(rt, voices=voices, skipped=changes.skipped)
