"""Where the daemon's memory goes, seen from inside one process.

``python -m bench.memprobe [VARIANT [PASSES]]`` loads what ``ttsd serve`` loads, in the order it
loads it, and reads its own resident memory (``/proc/self/smaps_rollup``: RSS and the
anonymous part of it) after each step, before and after ``malloc_trim`` (which the idle
daemon calls too); it prints one JSON object.  The steps:

1. the interpreter (``python -m``, as the daemon is started);
2. the imports, group by group in the order the daemon meets them (taken from
   ``python -X importtime -m appliance.main serve``): each row is what that group adds
   to what came before, so a lazy import of it saves about its row;
3. ``Runtime.load`` exactly as the daemon calls it, with a mark after the voice's cut
   is read and after each ONNX session is made (``appliance.model.engine.sessions.open_session``
   is wrapped here, in this process only);
4. the first phonemization (espeak-ng's data), the warm-up (ONNX Runtime's arenas grow
   on the first runs at each size) and the workers, and ``PASSES`` more warm-up passes;
5. the doors that are off by default (HTTP, Wyoming), imported last to size them.

``python -m bench.memprobe --second-voice [VARIANT [PASSES]]`` does the same with a second medium
voice beside the bundled one (:func:`second_voice_dir`): the second voice's sessions get
rows of their own, and the warm-up warms both.

``python -m bench.memprobe --ab VARIANT [RUNS]`` times a session-option cut against the
daemon's sessions in one process, interleaved (:func:`ab`).

``python -m bench.memprobe --serve VARIANT serve ...`` is ``ttsd serve ...`` with the
cut applied, for the daemon measured from outside.

A ``VARIANT`` applies one candidate cut to this process only (session options, one
decoder, glibc settings: :data:`VARIANTS`), so its saving can be read against the
``daemon`` variant.  Each variant also reports the CPU seconds per second of audio of
the warm-up's later clause (median of the passes), the cost of a cut in speed.
Bounds: one voice, about half a minute; nothing is written.
"""

from __future__ import annotations

import gc
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

IMPORT_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ttsd CLI: argparse, asyncio, logging, yaml, config", ("appliance.main",)),
    ("numpy", ("numpy",)),
    ("onnxruntime", ("onnxruntime",)),
    ("prometheus_client (metrics)", ("prometheus_client",)),
    ("markdown_it (Markdown input)", ("markdown_it",)),
    ("num2words (normaliser)", ("num2words",)),
    ("msgpack (protocol v1)", ("msgpack",)),
    ("soxr (resampling)", ("soxr",)),
    ("piper (espeak-ng bridge)", ("piper.espeakbridge",)),
    ("the rest of ttsd (daemon, core, text, model, v1 door)", ("appliance.daemon",)),
)
"""What ``ttsd serve`` imports with the default config, in its order (a group's own
imports that came earlier cost nothing here)."""

OFF_DOORS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("HTTP door (aiohttp, soundfile; off by default)", ("appliance.doors.http",)),
    ("Wyoming door (wyoming; off by default)", ("appliance.doors.wyoming",)),
)

CONFIG: dict[str, Any] = {"engine": {"backend": "onnx-cpu"}, "playback": {"enabled": False}}
"""The bench daemon's config (``bench.rig.start_daemon``)."""


def rollup(pid: int | str = "self") -> tuple[float, float]:
    """(RSS, anonymous) of a process (this one by default) in MB."""
    fields: dict[str, float] = {}
    with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                fields[parts[0].rstrip(":")] = int(parts[1]) / 1024
    return fields["Rss"], fields["Anonymous"]


class Probe:
    """Stages with the RSS after each: as it is (``held_mb``), and what stays once glibc
    has handed back its free heap (``rss_mb``, ``anon_mb``), so that a step's temporary
    buffers are not charged to the step after it."""

    def __init__(self) -> None:
        self.stages: list[dict[str, Any]] = []
        self.trim: Callable[[], object] = lambda: None

    def mark(self, stage: str) -> None:
        held, _ = rollup()
        self.trim()
        rss, anon = rollup()
        row = {"stage": stage, "rss_mb": rss, "anon_mb": anon, "held_mb": held}
        self.stages.append({k: round(v, 1) if isinstance(v, float) else v for k, v in row.items()})


def _import(probe: Probe, groups: tuple[tuple[str, tuple[str, ...]], ...]) -> None:
    import importlib

    for label, modules in groups:
        for name in modules:
            importlib.import_module(name)
        probe.mark(label)


# --------------------------------------------------------------------------- variants


def _session_options(change: Callable[[Any], None]) -> None:
    """Every ONNX session this process makes gets ``change(options)`` first."""
    import onnxruntime as ort

    real = ort.InferenceSession

    def make(path: Any, sess_options: Any = None, **kw: Any) -> Any:
        if sess_options is not None:
            change(sess_options)
        return real(path, sess_options=sess_options, **kw)

    ort.InferenceSession = make


def _config_entry(key: str, value: str) -> Callable[[], None]:
    return lambda: _session_options(lambda o: o.add_session_config_entry(key, value))


def _arena_off() -> None:
    _session_options(lambda o: setattr(o, "enable_cpu_mem_arena", False))


def _own_arenas() -> None:
    """Each session allocates from an arena of its own, growing by doubling (before the
    daemon's sessions shared one: ``appliance.model.engine.sessions.shared_cpu_arena``)."""
    _session_options(lambda o: o.add_session_config_entry("session.use_env_allocators", "0"))


def _arena_shrink() -> None:
    """The arena kept, its free regions given back at the end of every run."""
    import onnxruntime as ort

    real = ort.InferenceSession

    def make(*args: Any, **kw: Any) -> Any:
        session = real(*args, **kw)
        run = session.run

        def shrinking(outputs: Any, feeds: Any, opts: Any = None) -> Any:
            opts = opts if opts is not None else ort.RunOptions()
            opts.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
            return run(outputs, feeds, opts)

        session.run = shrinking
        return session

    ort.InferenceSession = make


def _no_2d_decoder() -> None:
    """Only the 1-D decoder (every window on it), as with one graph per part."""
    import dataclasses

    from appliance.core import runtime

    module: Any = runtime  # patched in this process only
    real = module.load_voice
    module.load_voice = lambda *a: dataclasses.replace(real(*a), lean_decoder_path=None)


def _first_start() -> None:
    """An empty cache: the voice is cut and checked (the fused model beside the parts)."""
    import tempfile

    CONFIG["voices"] = {"cache_dir": tempfile.mkdtemp(prefix="ttsd-memprobe-cache-")}


def _one_thread() -> None:
    """``engine.intra_op_threads: 1``: the 1-D decoder is not loaded, one thread a session."""
    CONFIG["engine"]["intra_op_threads"] = 1


VARIANTS: dict[str, Callable[[], None]] = {
    "daemon": lambda: None,
    "arena_off": _arena_off,
    "own_arenas": _own_arenas,
    "arena_shrink": _arena_shrink,
    "no_prepacking": _config_entry("session.disable_prepacking", "1"),
    "initializers_direct": _config_entry("session.use_device_allocator_for_initializers", "1"),
    "no_2d_decoder": _no_2d_decoder,
    "one_thread": _one_thread,
    "first_start": _first_start,
}
"""Candidate cuts.  :mod:`bench.memory` adds glibc's ``MALLOC_MMAP_THRESHOLD_`` to any of
them (``VARIANT+mmapK``), in the environment: glibc reads it at start."""


# --------------------------------------------------------------------------- the probe


def _prepared() -> None:
    """The cache as ``ttsd prepare`` leaves it on this machine (the voice cut, the 2-D
    decoder's blocked graph made), in another process: what a daemon's start finds, once
    it has started before or been prepared."""
    import tempfile

    import yaml

    with tempfile.TemporaryDirectory(prefix="ttsd-memprobe-") as tmp:
        cfg = Path(tmp, "config.yaml")
        cfg.write_text(yaml.safe_dump(CONFIG))
        cmd = [sys.executable, "-m", "appliance.main", "prepare", "--config", str(cfg)]
        subprocess.run(cmd, check=True, capture_output=True, timeout=900)


def _hook_loading(probe: Probe) -> None:
    """Marks after the voice's cut is read and after each ONNX session is made."""
    from appliance.core import runtime as runtime_module
    from appliance.model.engine import sessions as sessions_module

    # Patched in this process only; the daemon's code runs as it is between the marks.
    runtime: Any = runtime_module
    sessions: Any = sessions_module
    real_session, real_voice = sessions.open_session, runtime.load_voice

    def session(path: Any, threads: int, *args: Any, **kw: Any) -> Any:
        made = real_session(path, threads, *args, **kw)
        # The 2-D decoder kept blocked for this machine (appliance.model.nchwc) is the
        # decoder2d.onnx row, as it runs.
        name = re.sub(r"\.blocked-[0-9a-f]+\.onnx$", ".onnx", path.name)
        how = ", blocked" if name != path.name else ""
        probe.mark(f"ONNX session {name} ({threads} thread{'s' * (threads > 1)}{how})")
        return made

    def load_voice(*args: Any) -> Any:
        voice = real_voice(*args)
        probe.mark("voice: config, checksum, cached cut")
        return voice

    sessions.open_session = session
    runtime.load_voice = load_voice


def run(variant: str, passes: int = 5) -> dict[str, Any]:
    probe = Probe()
    probe.mark("interpreter (python -m)")
    _import(probe, IMPORT_GROUPS[:1])
    from appliance.ops import memory  # imported by the first group

    memory.limit_malloc_arenas(2)  # as cmd_serve does before any thread allocates
    probe.trim = memory.trim
    _import(probe, IMPORT_GROUPS[1:3])  # onnxruntime before a variant changes its sessions
    VARIANTS[variant]()
    if variant != "first_start":
        _prepared()
    _import(probe, IMPORT_GROUPS[3:])
    from appliance.core.runtime import Runtime
    from appliance.ops.config import parse_config

    _hook_loading(probe)
    rt = Runtime.load(parse_config(CONFIG), warm=False)
    probe.mark("runtime assembled (scheduler, metrics)")
    voice = rt.voices[rt.default_voice]
    voice.phonemizer.ids("Hello.")
    probe.mark("espeak-ng: first phonemization")
    rt.finish_start()
    probe.mark("warm-up (first runs: arenas) and workers")
    costs = sorted(rt.warm_voice(voice) or 0.0 for _ in range(passes))
    probe.mark(f"after {passes} more warm-up passes")
    gc.collect()
    probe.mark("gc.collect(): what only cycles held")
    _import(probe, OFF_DOORS)
    rt.scheduler.stop()
    return {
        "variant": variant,
        "stages": probe.stages,
        "cpu_per_audio_s": costs[len(costs) // 2] if costs else None,
        "peak_mb": _peak_mb(),
    }


def second_voice_dir() -> str:
    """A voices directory with a second medium voice: the bundled voice again under another
    name (a real Piper voice of the same size; its sessions are its own, its cut shared)."""
    import tempfile
    from pathlib import Path

    from appliance.model.voices import bundled_voice_path

    bundled = bundled_voice_path()
    voices = Path(tempfile.mkdtemp(prefix="ttsd-bench-voices-"))
    (voices / "en_US-second-medium.onnx").symlink_to(bundled)
    (voices / "en_US-second-medium.onnx.json").symlink_to(f"{bundled}.json")
    return str(voices)


def _peak_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def ab(variant: str, runs: int = 20) -> dict[str, Any]:
    """What a session-option cut costs in speed: the bundled voice loaded twice in this
    process (one intra-op thread, so a call's whole cost is its thread's CPU time), once
    as the daemon makes its sessions and once with ``variant``'s; a clause (prior, flow,
    decoder windows of 32 frames) timed on each in turn, ``runs`` times."""
    import statistics

    import onnxruntime as ort

    from appliance.core.warmup import WARM_UP_LATER
    from appliance.model.engine.base import Scales
    from appliance.model.engine.select import load_voice_model
    from appliance.model.engine.threads import cpu_plan
    from appliance.model.engine.windows import decode_windows
    from appliance.model.voices import bundled_voice_path, load_voice
    from appliance.ops.config import parse_config
    from appliance.ops.cpuquota import cpu_quota
    from appliance.ops.paths import default_cache_dir
    from appliance.text.phonemize import Phonemizer

    voice = load_voice("en_US-joe-medium", bundled_voice_path(), default_cache_dir())
    cfg = parse_config({"engine": {"backend": "onnx-cpu", "intra_op_threads": 1}})
    real = ort.InferenceSession
    plan = cpu_plan(cfg, cpu_quota(), pin=False)
    plain, _ = load_voice_model(voice, cfg, plan)
    VARIANTS[variant]()  # patches InferenceSession for the sessions made from here on
    cut, _ = load_voice_model(voice, cfg, plan)
    ort.InferenceSession = real
    info = voice.info
    ids = Phonemizer(info).ids(WARM_UP_LATER)
    scales = Scales(info.noise_scale, info.length_scale, info.noise_w)
    times: dict[str, list[float]] = {"daemon": [], variant: []}
    for i in range(2 * runs + 2):
        name, model = ("daemon", plain) if i % 2 == 0 else (variant, cut)
        t0 = time.thread_time()
        enc = model.encode_prior(ids, scales, None)
        decode_windows(model, enc, 32, voice.context_frames, info.hop_length)
        if i >= 2:  # one warm-up run each
            times[name].append((time.thread_time() - t0) * 1000)
    ms = {name: statistics.median(t) for name, t in times.items()}
    return {"variant": variant, "runs": runs, "cpu_ms": ms, "ratio": ms[variant] / ms["daemon"]}


def serve(variant: str, argv: list[str]) -> int:
    """``ttsd`` (``appliance.main``) with ``variant`` applied first: the cut on the real
    daemon, measured from outside by :mod:`bench.memory`."""
    import onnxruntime  # noqa: F401  (a variant patches its sessions)

    VARIANTS[variant]()
    from appliance.main import main as ttsd

    return ttsd(argv)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--serve"]:
        return serve(argv[1], argv[2:])
    if argv[:1] == ["--ab"]:
        print(json.dumps(ab(argv[1], int(argv[2]) if len(argv) > 2 else 20)))
        return 0
    if argv[:1] == ["--second-voice"]:
        argv = argv[1:]
        CONFIG["voices"] = {"voices_dir": second_voice_dir()}
    variant = argv[0] if argv else "daemon"
    passes = int(argv[1]) if len(argv) > 1 else 5
    if variant not in VARIANTS:
        print(f"unknown variant {variant!r}; have: {', '.join(VARIANTS)}", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    result = run(variant, passes)
    result["wall_s"] = round(time.monotonic() - t0, 1)
    result["env"] = {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
