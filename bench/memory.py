"""Where the daemon's resident memory goes, and what it does over many requests.

``python -m bench.memory [--requests 1000] [--growth 3000] [--candidates ...]
[--daemon-candidates ...] [--second-voice ...]`` (or ``python -m bench --only memory``)
prints three tables:

* **inside**: :mod:`bench.memprobe` in a subprocess, loading what ``ttsd serve`` loads in
  its order: RSS after each import group, the voice's cut, each ONNX session, the
  warm-up (arenas);
* **outside**: the real daemon (``bench.rig.start_daemon``, the bundled voice) read from
  ``/proc/PID``: idle after warm-up, after the first request, after ``requests`` mixed
  requests (:data:`MIX`: the modes, text formats, output formats and options a client
  has; two clients at once; every 20th drops its connection after its first chunk), idle
  after them, peak, and the growth over ``growth`` requests from the first, each mark read
  with the clients paused: at rest, then kept once the daemon has trimmed; one column
  per daemon candidate (``daemon``: as it is; a cut applied by ``bench.memprobe --serve``);
  then, per ``--second-voice`` candidate, what a second medium voice adds (the bundled
  voice again under another name: the same size, sessions of its own), and a first
  start (an empty cache: the voice is cut and checked before the daemon listens);
* **cuts**: each candidate (:data:`bench.memprobe.VARIANTS`, ``+mmapK`` for glibc's mmap
  threshold) probed against the probe of the daemon as it is, with its CPU per second of
  audio (noisy on a busy machine: ``python -m bench.memprobe --ab VARIANT`` times a
  session-option cut interleaved in one process).

Bounds: ``growth`` requests of a few seconds of audio at most each (the full figure,
3 000, took ~2 hours on 2 cores shared with other work); each probe about a minute.
JSON in ``OUT/memory.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from appliance.upkeep import TRIM_EVERY_S
from bench.concurrency import TEXTS
from bench.memprobe import VARIANTS, rollup, second_voice_dir
from bench.rig import peak_rss_mb, poll_until, rss_mb, start_daemon

ROOT = Path(__file__).resolve().parents[1]

MIX: tuple[tuple[str, dict[str, Any]], ...] = (
    ("{short}", {}),
    ("{long}", {"mode": "sentence", "format": "f32le"}),
    ("{short}", {"mode": "reading"}),
    ("{long}", {"mode": "dialog", "noise_scale": 0.5}),
    (
        "<speak>{short} <break time='200ms'/> <emphasis>{word}</emphasis>.</speak>",
        {"text_format": "ssml"},
    ),
    ("# {word}\n\n- **{short}**\n- call `Tom` at 5 pm", {"text_format": "markdown"}),
    ("It costs $12.50 on 3/4/2025 at 10:30, {short}", {"word_timings": True}),
    ("{short}", {"speed": 1.5, "sample_rate": 16000}),
    ("{short}", {"format": "mulaw", "deterministic": True}),
)
"""Request ``k`` is ``MIX[k % len(MIX)]``, its text filled from :data:`bench.concurrency.TEXTS`
with ``k`` (so the shapes vary as real traffic's do); batch class, read as fast as it comes."""

DROP_EVERY = 20


def request_for(k: int) -> tuple[str, dict[str, Any]]:
    template, opts = MIX[k % len(MIX)]
    words = TEXTS[k % len(TEXTS)].split()
    short = " ".join(words[: 3 + k % 6]).rstrip(",.") + "."
    long = " ".join(TEXTS[(k + 1) % len(TEXTS)].split()[: 12 + k % 9]).rstrip(",.") + "."
    text = template.format(short=short, long=long, word=words[-1].strip(".,"))
    return text, {"realtime": False, **opts}


# --------------------------------------------------------------------------- outside


def _rollup_mb(pid: int) -> dict[str, float]:
    rss, anon = rollup(pid)
    return {"rss_mb": round(rss, 1), "anon_mb": round(anon, 1)}


def one_request(
    client: Any,
    k: int,
    drop: bool | None = None,
    request: Callable[[int], tuple[str, dict[str, Any]]] = request_for,
) -> tuple[Any, str]:
    """Request ``k`` on ``client``; the client to use next (a new one after a drop).
    ``drop``: whether the client leaves after the first chunk (default: every
    :data:`DROP_EVERY`-th); ``request``: request ``k``'s text and options."""
    from appliance.clients.client import Client, TtsdError

    text, opts = request(k)
    drop = k % DROP_EVERY == DROP_EVERY - 1 if drop is None else drop
    try:
        for ev in client.synthesize(text, **opts):
            if ev.get("event") == "chunk" and drop:
                client.close()  # gone mid-stream, as a client that crashed
                return Client(client.path), "dropped"
            if ev.get("event") == "end":
                return client, "end"
    except TtsdError as exc:
        return client, f"error: {exc.code}"
    return client, "no end"


SETTLE_S = TRIM_EVERY_S + 2.0
"""How long a mark waits, its clients paused, before its second read: the daemon trims its
heap about :data:`~appliance.upkeep.TRIM_EVERY_S` after a request ends."""


class MixedLoad:
    """``n`` requests of :data:`MIX` from two clients at once, paused at each mark to read RSS.

    A mark reads with nothing in flight: each read taken as a request ended held the other
    client's buffers (a 256-frame decoder window, a long prior run) and moved by ±10 MB
    from one read to the next, so a growth figure compared two such moments.  ``samples``
    is read at once (the freed heap still resident), ``kept`` after ``settle_s`` more (the
    daemon's own trim has run: what it keeps)."""

    def __init__(
        self,
        sock: str,
        pid: int,
        clients: int = 2,
        settle_s: float = SETTLE_S,
        one: Callable[[Any, int], tuple[Any, str]] | None = None,
    ) -> None:
        self.sock, self.pid, self.clients, self.settle_s = sock, pid, clients, settle_s
        # Request ``k`` on a client: the client to use next, and how it ended
        # (:func:`one_request`).
        self.one = one or one_request
        self.outcomes: Counter[str] = Counter()
        self.samples: list[tuple[int, float]] = []
        self.kept: list[tuple[int, float]] = []
        self._lock = threading.Lock()

    def run(self, n: int, sample_at: set[int]) -> float:
        """Wall seconds of the requests (the pauses not counted); at each of ``sample_at``
        (requests done) the clients pause, ``samples`` and ``kept`` get a read each."""
        from appliance.clients.client import Client

        clients = [Client(self.sock) for _ in range(self.clients)]
        busy, done = 0.0, 0
        try:
            for mark in sorted(k for k in sample_at if 0 < k <= n):
                t0 = time.monotonic()
                self._segment(clients, done, mark)
                busy += time.monotonic() - t0
                done = mark
                self._read(done)
        finally:
            for c in clients:
                c.close()
        return busy

    def _segment(self, clients: list[Any], lo: int, hi: int) -> None:
        """Requests [lo, hi), the clients at once; a client that dropped comes back new."""
        ks = iter(range(lo, hi))

        def worker(slot: int) -> None:
            while (k := next(ks, None)) is not None:
                clients[slot], outcome = self.one(clients[slot], k)
                with self._lock:
                    self.outcomes[outcome] += 1

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(clients))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    def _read(self, done: int) -> None:
        _wait_quiet(self.sock)
        self.samples.append((done, round(rss_mb(self.pid), 1)))
        time.sleep(self.settle_s)
        self.kept.append((done, round(rss_mb(self.pid), 1)))
        # A growth run takes an hour or more: say where it is.
        print(
            f"[{done} requests: {self.samples[-1][1]} MB, {self.kept[-1][1]} MB kept]",
            file=sys.stderr,
            flush=True,
        )


def fitted_growth(reads: list[tuple[int, float]], requests: int) -> float:
    """MB over ``requests`` by the least-squares line through (requests done, MB) reads:
    at rest the kept reads still move by ~8 MB (sd) from one mark to the next, so two of
    them say little; the line uses them all (0 with fewer than two marks)."""
    if len(reads) < 2:
        return 0.0
    x, y = np.array(reads, dtype=np.float64).T
    return float(np.polyfit(x, y, 1)[0]) * requests


def _wait_quiet(sock: str, timeout_s: float = 30.0) -> None:
    """Until the daemon has no stream and nothing queued (a dropped client's stream ends
    on its own a moment after the drop)."""

    def quiet(client: Any) -> bool:
        s = client.stats()
        return not s["streams"] and not s["queue_depth"]

    poll_until(sock, quiet, "go quiet", timeout_s, 0.05)


GLIBC_KNOBS = {"mmap": ("MALLOC_MMAP_THRESHOLD_", 1024), "arenas": ("MALLOC_ARENA_MAX", 1)}
"""``+mmapK`` and ``+arenasN``: the glibc environment variable each sets, and its unit."""


def _spec(candidate: str) -> tuple[str, dict[str, str]]:
    """``VARIANT``, ``VARIANT+mmapK`` or ``VARIANT+arenasN`` → the probe's variant and the
    environment it adds.

    ``+mmapK``: glibc serves every allocation of ``K`` KiB or more with a mapping of its
    own, given back at ``free`` (and stops raising that threshold as big blocks are freed,
    which it does by default up to 32 MiB, keeping them in the heap after).  ``+arenasN``:
    glibc keeps at most ``N`` heaps (by default up to 8 per core, one per thread that
    allocates at once), so that freed blocks are reused across threads."""
    variant, _, extra = candidate.partition("+")
    knob = next((k for k in GLIBC_KNOBS if extra.startswith(k)), None)
    value = extra.removeprefix(knob) if knob else ""
    if variant not in VARIANTS or (extra and not (knob and value.isdigit())):
        raise ValueError(
            f"unknown candidate {candidate!r}; have {', '.join(VARIANTS)} (+mmapK, +arenasN)"
        )
    if knob is None:
        return variant, {}
    name, unit = GLIBC_KNOBS[knob]
    return variant, {name: str(int(value) * unit)}


def daemon_memory(
    out: Path, requests: int, growth: int, candidate: str = "daemon", settle_s: float = SETTLE_S
) -> dict[str, Any]:
    """The real daemon, read from outside: idle, first request, ``requests``, growth (each
    read with the clients paused, see :class:`MixedLoad`).  ``candidate``: a cut applied to
    it first (:func:`_spec`)."""
    entry, env = _daemon_entry(candidate)
    proc, sock = start_daemon(out, entry=entry, env=env)
    try:
        time.sleep(1.0)
        rows = [("idle after warm-up", _rollup_mb(proc.pid))]
        load = MixedLoad(sock, proc.pid, settle_s=settle_s)
        total = max(requests, growth)
        every = max(1, growth // 10)
        marks = {1, requests, growth, total, *range(every, total + 1, every)}
        wall = load.run(total, marks)
        rss, kept = dict(load.samples), dict(load.kept)
        time.sleep(2.0)
        rows.append((f"idle 2 s after {total} requests", _rollup_mb(proc.pid)))
        return {
            "candidate": candidate,
            "rows": rows,
            "first_request_mb": rss[1],
            "after_requests_mb": rss[requests],
            "first_request_kept_mb": kept[1],
            "after_requests_kept_mb": kept[requests],
            "requests": requests,
            "growth": growth,
            "growth_mb": round(kept[growth] - kept[1], 1),
            "growth_after_tenth_mb": round(kept[growth] - kept[min(every, growth)], 1),
            "growth_fit_mb": round(fitted_growth(load.kept, growth), 1),
            "samples": sorted(load.samples),
            "kept": sorted(load.kept),
            "outcomes": dict(load.outcomes),
            "peak_mb": round(peak_rss_mb(proc.pid), 1),
            "wall_s": round(wall, 1),
        }
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def _daemon_entry(candidate: str) -> tuple[tuple[str, ...], dict[str, str]]:
    """How to start the daemon with ``candidate`` applied (:func:`_spec`)."""
    variant, env = _spec(candidate)
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    if variant == "daemon":
        return ("-m", "appliance.main"), {**env, "PYTHONPATH": path}
    return ("-m", "bench.memprobe", "--serve", variant), {**env, "PYTHONPATH": path}


def _voices_rss(out: Path, candidate: str, extra: Path | None) -> float:
    """RSS of a daemon idle after one request on each of its voices."""
    from appliance.clients.client import Client

    entry, env = _daemon_entry(candidate)
    config = {"voices": {"voices_dir": str(extra)}} if extra else None
    proc, sock = start_daemon(out, config, entry=entry, env=env)
    try:
        with Client(sock) as client:
            for voice in client.info()["voices"]:
                name = voice["name"] if isinstance(voice, dict) else str(voice)
                client.synthesize_all(TEXTS[0], voice=name, realtime=False)
        time.sleep(1.0)
        return _rollup_mb(proc.pid)["rss_mb"]
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def second_voice(out: Path, candidate: str = "daemon") -> dict[str, Any]:
    """The cost of an extra medium voice: the bundled voice again under a second name (the
    same size, sessions of its own), each daemon idle after one request on each voice."""
    one = _voices_rss(out, candidate, None)
    two = _voices_rss(out, candidate, Path(second_voice_dir()))
    return {"candidate": candidate, "one_mb": one, "two_mb": two, "extra_mb": round(two - one, 1)}


def first_start(out: Path) -> dict[str, Any]:
    """A daemon whose cache is empty: it cuts and checks the voice (the fused model
    loaded beside the parts) before serving; RSS idle after warm-up and one request."""
    from appliance.clients.client import Client

    cache = Path(tempfile.mkdtemp(prefix="ttsd-bench-cache-"))
    entry, env = _daemon_entry("daemon")
    t0 = time.monotonic()
    config = {"voices": {"cache_dir": str(cache)}}
    proc, sock = start_daemon(out, config, entry=entry, env=env, timeout_s=1800.0)
    try:
        ready_s = time.monotonic() - t0
        with Client(sock) as client:
            client.synthesize_all(TEXTS[0], realtime=False)
        time.sleep(1.0)
        return {
            **_rollup_mb(proc.pid),
            "peak_mb": round(peak_rss_mb(proc.pid), 1),
            "ready_s": ready_s,
        }
    finally:
        proc.terminate()
        proc.wait(timeout=60)


# --------------------------------------------------------------------------- inside


def run_probe(candidate: str = "daemon", passes: int = 3) -> Any:
    """:mod:`bench.memprobe` in a fresh interpreter with ``candidate`` (:func:`_spec`)."""
    variant, env = _spec(candidate)
    cmd = [sys.executable, "-m", "bench.memprobe", variant, str(passes)]
    done = subprocess.run(
        cmd,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"memprobe {candidate} failed: {done.stderr[-2000:]}")
    result = json.loads(done.stdout)
    result["variant"] = candidate
    return result


# --------------------------------------------------------------------------- tables


def warm_rss(probe: dict[str, Any]) -> float:
    """The probe's RSS after its warm-up passes (the daemon idle, its doors off)."""
    stage = next(s for s in probe["stages"] if s["stage"].startswith("after "))
    return float(stage["rss_mb"])


def format_inside(probe: dict[str, Any]) -> str:
    lines = [
        "| step | RSS after | added | of which anonymous | held before malloc_trim |",
        "|---|---|---|---|---|",
    ]
    rss = anon = 0.0
    for s in probe["stages"]:
        lines.append(
            f"| {s['stage']} | {s['rss_mb']:.1f} MB | {s['rss_mb'] - rss:+.1f} "
            f"| {s['anon_mb'] - anon:+.1f} | {s['held_mb']:.1f} MB |"
        )
        rss, anon = s["rss_mb"], s["anon_mb"]
    lines.append(f"\nPeak (VmHWM) {probe['peak_mb']:.1f} MB; wall {probe['wall_s']} s.")
    return "\n".join(lines)


def format_outside(
    daemons: list[dict[str, Any]],
    seconds: list[dict[str, Any]],
    first: dict[str, Any] | None = None,
) -> str:
    """One column per daemon (as it is, then each cut measured on it)."""
    head = " | ".join(d["candidate"] for d in daemons)
    lines = [f"| daemon, read from outside | {head} |", "|---" * (len(daemons) + 1) + "|"]

    def row(label: str, cell: Any) -> None:
        lines.append(f"| {label} | " + " | ".join(cell(d) for d in daemons) + " |")

    d0 = daemons[0]
    row("idle after warm-up", lambda d: f"{d['rows'][0][1]['rss_mb']:.1f} MB")
    row(
        "after the first request: at rest; kept (after the daemon's trim)",
        lambda d: f"{d['first_request_mb']:.1f}; {d['first_request_kept_mb']:.1f} MB",
    )
    row(
        f"after {d0['requests']} mixed requests: at rest; kept",
        lambda d: f"{d['after_requests_mb']:.1f}; {d['after_requests_kept_mb']:.1f} MB",
    )
    row("idle 2 s after the last request", lambda d: f"{d['rows'][1][1]['rss_mb']:.1f} MB")
    row("peak (VmHWM)", lambda d: f"{d['peak_mb']:.1f} MB")
    row(
        f"growth over {d0['growth']} requests, kept: from the first; from the first tenth; "
        "the line fitted to every mark",
        lambda d: (
            f"{d['growth_mb']:+.1f} MB; {d['growth_after_tenth_mb']:+.1f} MB; "
            f"{d['growth_fit_mb']:+.1f} MB"
        ),
    )
    row("outcomes; wall", lambda d: f"{d['outcomes']}; {d['wall_s']:.0f} s")
    if first is not None:
        lines.append(
            f"\nA first start (empty cache: the voice cut and checked, {first['ready_s']:.0f} s "
            f"to ready): {first['rss_mb']:.1f} MB idle after one request, peak "
            f"{first['peak_mb']:.1f} MB."
        )
    for v in seconds:
        lines.append(
            f"\nA second medium voice, {v['candidate']}: {v['one_mb']:.1f} → {v['two_mb']:.1f} MB "
            f"(**{v['extra_mb']:+.1f} MB**), each daemon idle after one request on each voice."
        )
    return "\n".join(lines)


def format_cuts(base: dict[str, Any], cuts: list[dict[str, Any]]) -> str:
    lines = [
        "| candidate | RSS, warm and idle | saving | peak | CPU s per audio s |",
        "|---|---|---|---|---|",
    ]
    b = warm_rss(base)
    for r in [base, *cuts]:
        rss = warm_rss(r)
        cpu = r["cpu_per_audio_s"]
        lines.append(
            f"| {r['variant']} | {rss:.1f} MB | {b - rss:+.1f} MB | {r['peak_mb']:.1f} MB "
            f"| {cpu:.3f} ({cpu / base['cpu_per_audio_s']:.2f}×) |"
        )
    return "\n".join(lines)


PROBE_CANDIDATES = [*(v for v in VARIANTS if v != "daemon"), "daemon+mmap64"]
PROBE_CANDIDATES += ["arena_off+mmap64", "arena_off+mmap1024"]
DAEMON_CANDIDATES = ["daemon", "arena_off"]
SECOND_VOICE_CANDIDATES = ["daemon", "own_arenas"]
"""Not ``arena_off``: with a second voice its daemon failed in the warm-up (not looked
into; it saved nothing with one voice), and one failed candidate ends ``make bench``."""


def bench_memory(
    out: Path,
    requests: int = 1000,
    growth: int = 3000,
    candidates: list[str] | None = None,
    daemon_candidates: list[str] | None = None,
    passes: int = 3,
    seconds: list[str] | None = None,
    cut: bool = True,
) -> dict[str, Any]:
    """Every table.  ``candidates`` are probed (default :data:`PROBE_CANDIDATES`),
    ``daemon_candidates`` (``daemon``: as it is) run as the daemon under the same load and
    ``seconds`` with a second voice (defaults :data:`DAEMON_CANDIDATES`,
    :data:`SECOND_VOICE_CANDIDATES`); an empty ``candidates`` or ``seconds`` skips them.
    ``cut``: also a first start, the voice cut on an empty cache (minutes)."""
    candidates = PROBE_CANDIDATES if candidates is None else candidates
    daemon_candidates = DAEMON_CANDIDATES if daemon_candidates is None else daemon_candidates
    seconds = SECOND_VOICE_CANDIDATES if seconds is None else seconds
    base = run_probe("daemon", passes)
    print("\n## Where the memory goes (inside: bench.memprobe)\n")
    print(format_inside(base))
    daemons = [daemon_memory(out, requests, growth, c) for c in daemon_candidates or ["daemon"]]
    two = [second_voice(out, c) for c in seconds]
    first = first_start(out) if cut else None
    print("\n## The daemon from outside (bundled voice, default doors)\n")
    print(format_outside(daemons, two, first))
    result: dict[str, Any] = {"probe": base, "daemons": daemons, "second_voice": two}
    result["first_start"] = first
    if candidates:
        cuts = [run_probe(c, passes) for c in candidates]
        print("\n## Candidate cuts (each in the probe, against the daemon as it is)\n")
        print(format_cuts(base, cuts))
        result["cuts"] = cuts
    (out / "memory.json").write_text(json.dumps(result, indent=1))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--growth", type=int, default=3000)
    parser.add_argument("--passes", type=int, default=3, help="warm-up passes timed per probe")
    parser.add_argument("--candidates", nargs="*", default=PROBE_CANDIDATES)
    parser.add_argument("--daemon-candidates", nargs="*", default=DAEMON_CANDIDATES)
    parser.add_argument("--second-voice", nargs="*", default=SECOND_VOICE_CANDIDATES)
    parser.add_argument("--no-first-start", action="store_true", help="skip the cut on start")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    bench_memory(
        args.out,
        args.requests,
        args.growth,
        args.candidates,
        args.daemon_candidates,
        args.passes,
        args.second_voice,
        not args.no_first_start,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
