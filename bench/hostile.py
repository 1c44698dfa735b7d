"""Hostile inputs from outside (issue 32): what each gets back, and what it costs the daemon.

For every input the issue lists, from a client on loopback against a real daemon (v1 on its
Unix socket, Wyoming and HTTP on TCP): the answer (event, error code or HTTP status), how
long it took, and the daemon's RSS before and after.  ``ping`` is sent every 10 ms from
another connection while the run of punctuation is prepared; its P99 is printed.

    python -m bench.hostile [--out bench-out] [--only NAME ...]

Not part of ``make bench``'s figures (nothing here is a speed): it is the re-run the
issue's closing note asks for, kept so that anyone can run it again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from appliance.clients.client import Client
from bench.rig import free_port, rss_mb

Result = dict[str, Any]


class Box:
    """One daemon with every door on: v1 on a Unix socket, Wyoming and HTTP on loopback."""

    def __init__(self, out: Path, extra: dict[str, Any] | None = None, prefix: Sequence[str] = ()):
        import yaml

        self.tmp = Path(tempfile.mkdtemp(prefix="ttsd-hostile-"))
        self.sock = str(self.tmp / "ttsd.sock")
        self.http_port, self.wyoming_port = free_port(), free_port()
        cfg: dict[str, Any] = {
            "engine": {"backend": "onnx-cpu"},
            "playback": {"enabled": False},
            "http": {"listen": f"127.0.0.1:{self.http_port}"},
            "wyoming": {"uri": f"tcp://127.0.0.1:{self.wyoming_port}"},
        }
        for key, value in (extra or {}).items():
            cfg.setdefault(key, {}).update(value)
        self.config = self.tmp / "config.yaml"
        self.config.write_text(yaml.safe_dump(cfg))
        self.log = self.tmp / "daemon.log"
        cmd = [*prefix, sys.executable, "-m", "appliance.main", "serve", "--socket", self.sock]
        cmd += ["--config", str(self.config)]
        with self.log.open("wb") as f:
            self.proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
        self._wait()

    def _wait(self, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return  # exited: the case reads the log
            try:
                with socket.create_connection(("127.0.0.1", self.http_port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("daemon did not start")

    @property
    def rss(self) -> float:
        return rss_mb(self.proc.pid) if self.proc.poll() is None else float("nan")

    def v1(self, message: dict[str, Any], timeout: float = 120.0) -> tuple[str, float]:
        """The terminal event of one request ('end', 'error CODE', 'pong' …) and seconds."""
        t0 = time.monotonic()
        with Client(self.sock, timeout=timeout) as c:
            c.send(message)
            while True:
                ev = c.recv()
                kind = str(ev.get("event"))
                if kind == "error":
                    return f"error {ev.get('code')}", time.monotonic() - t0
                if kind not in ("start", "chunk", "queued", "started", "mark"):
                    audio = ev.get("stats", {}).get("audio_ms")
                    return (f"{kind} ({audio} ms audio)" if audio else kind), time.monotonic() - t0

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def measured(box: Box, fn: Callable[[], str]) -> Result:
    before = box.rss
    t0 = time.monotonic()
    try:
        answer = fn()
    except Exception as exc:  # an input that breaks the client is an answer too
        answer = f"client saw {type(exc).__name__}: {exc}"[:120]
    took = time.monotonic() - t0
    return {"answer": answer, "s": round(took, 2), "rss_before": before, "rss_after": box.rss}


# ---------------------------------------------------------------- protocol v1


def ssml(box: Box, body: str) -> str:
    msg = {"op": "synthesize", "id": 1, "text": f"<speak>{body}</speak>", "text_format": "ssml"}
    return box.v1(msg)[0]


def v1_cases(box: Box) -> dict[str, Callable[[], str]]:
    def phoneme(n: int) -> Callable[[], str]:
        return lambda: ssml(box, f'<phoneme ph="{"ə" * n}">word</phoneme>')

    return {
        "phoneme_1000": phoneme(1000),
        "phoneme_2000": phoneme(2000),
        "phoneme_4000": phoneme(4000),
        "break_400_nines": lambda: ssml(box, f'a<break time="{"9" * 400}ms"/>b'),
        "volume_+6200dB": lambda: ssml(box, '<prosody volume="+6200dB">a</prosody>'),
        "date_400_digit_year": lambda: ssml(
            box, f'<say-as interpret-as="date" format="y">{"9" * 400}</say-as>'
        ),
        "breaks_300x10s": lambda: ssml(box, '<break time="10s"/>a' * 300),
        "phonemes_op_400_nines": lambda: box.v1(
            {
                "op": "phonemes",
                "id": 1,
                "text": f'<speak>a<break time="{"9" * 400}ms"/></speak>',
                "text_format": "ssml",
            }
        )[0],
        "hung_text_streams": lambda: hung_text_streams(box),
        "batched_40kb_x3": lambda: batched(
            box, [{"op": "phonemes", "id": i, "text": "a " * 20000} for i in range(3)]
        ),
        "batched_19kb_phonemes_x10": lambda: batched(
            box, [{"op": "phonemes", "id": i, "text": "word " * 3800} for i in range(10)]
        ),
        "batched_10000_appends": lambda: appends(box, 10000),
        "speaker_superscript_two": lambda: box.v1(
            {"op": "synthesize", "id": 1, "text": "Hello.", "speaker": "²"}
        )[0],
    }


def batched(box: Box, messages: list[dict[str, Any]]) -> str:
    """All messages in one write; the answers' terminal events, counted."""
    import msgpack

    data = b"".join(msgpack.packb(m) for m in messages)
    with Client(box.sock, timeout=120) as c:
        c._sock.sendall(data)
        seen: dict[str, int] = {}
        for _ in messages:
            ev = c.recv()
            key = str(ev.get("event")) if ev.get("event") != "error" else f"error {ev.get('code')}"
            seen[key] = seen.get(key, 0) + 1
            if ev.get("code") == "frame_too_large":
                break
    return ", ".join(f"{v} × {k}" for k, v in seen.items())


def appends(box: Box, n: int) -> str:
    import msgpack

    with Client(box.sock, timeout=120) as c:
        c.send({"op": "synthesize", "id": 1, "text_stream": True})
        first = c.recv()
        data = b"".join(msgpack.packb({"op": "append", "target": 1, "text": "a"}) for _ in range(n))
        c._sock.sendall(data + msgpack.packb({"op": "finish", "target": 1}))
        while True:
            ev = c.recv()
            if ev.get("event") in ("end", "error"):
                code = f" {ev.get('code')}" if ev["event"] == "error" else ""
                return f"{first.get('event')} … {ev['event']}{code}"


def hung_text_streams(box: Box) -> str:
    """12 text streams whose first piece is over max_text_chars, then a real request."""
    answers: dict[str, int] = {}
    with Client(box.sock, timeout=30) as c:
        for i in range(12):
            c.send({"op": "synthesize", "id": i, "text_stream": True, "text": "a" * 20001})
        deadline = time.monotonic() + 10
        ended = 0
        while ended < 12 and time.monotonic() < deadline:
            ev = c.recv()
            if ev.get("event") in ("end", "error"):
                ended += 1
                key = ev["event"] if ev["event"] == "end" else f"error {ev.get('code')}"
                answers[key] = answers.get(key, 0) + 1
        after, _ = box.v1({"op": "synthesize", "id": 99, "text": "Still there?"})
    return f"{', '.join(f'{v} × {k}' for k, v in answers.items())}; then a request: {after}"


def punctuation_with_pings(box: Box) -> Result:
    """'.' × 19 999 + 'a' prepared while another connection pings every 10 ms."""
    waits: list[float] = []
    stop = threading.Event()

    def pinger() -> None:
        with Client(box.sock, timeout=60) as c:
            while not stop.is_set():
                t0 = time.monotonic()
                c.ping()
                waits.append((time.monotonic() - t0) * 1000)
                time.sleep(0.01)

    thread = threading.Thread(target=pinger)
    thread.start()
    time.sleep(0.3)
    try:
        result = measured(
            box, lambda: box.v1({"op": "synthesize", "id": 1, "text": "." * 19999 + "a"})[0]
        )
        result["ping_p99_ms"] = round(float(np.percentile(waits, 99)), 1)
    finally:
        stop.set()
        thread.join()
    return result


# ---------------------------------------------------------------- Wyoming


def wyoming(box: Box, voice: dict[str, Any] | None, text: str = "Hello.") -> str:
    from wyoming.client import AsyncTcpClient
    from wyoming.tts import Synthesize, SynthesizeVoice

    async def run() -> str:
        async with AsyncTcpClient("127.0.0.1", box.wyoming_port) as c:
            answers = []
            for v in (voice, None):  # the hostile request, then a plain one on the same link
                syn = Synthesize(text=text, voice=SynthesizeVoice(**v) if v else None)
                await c.write_event(syn.event())
                while True:
                    ev = await asyncio.wait_for(c.read_event(), 30)
                    if ev is None:
                        answers.append("closed")
                        break
                    if ev.type in ("error", "audio-stop"):
                        answers.append(ev.type + (f" {ev.data.get('code')}" if ev.data else ""))
                        break
            return " / next on the connection: ".join(answers)

    try:
        return asyncio.run(run())
    except (TimeoutError, OSError) as exc:
        return f"no answer ({type(exc).__name__})"


def wyoming_cases(box: Box) -> dict[str, Callable[[], str]]:
    return {
        "wyoming_speaker_superscript_two": lambda: wyoming(box, {"speaker": "²"}),
        "wyoming_speaker_4301_digits": lambda: wyoming(box, {"speaker": "9" * 4301}),
    }


# ---------------------------------------------------------------- HTTP


def http_raw(box: Box, data: bytes, timeout: float = 30.0) -> str:
    """The status line of one raw request, or how the connection ended."""
    with socket.create_connection(("127.0.0.1", box.http_port), timeout=timeout) as s:
        s.sendall(data)
        got = b""
        try:
            while b"\r\n" not in got:
                piece = s.recv(4096)
                if not piece:
                    break
                got += piece
        except TimeoutError:
            return "no answer"
    return got.split(b"\r\n", 1)[0].decode("latin-1") or "closed"


def speech(body: bytes, headers: str = "") -> bytes:
    return (
        f"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"{headers}Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def healthz_while_held(box: Box, n: int, send: bytes, every_s: float | None) -> str:
    """/healthz while ``n`` connections hold the door (sending ``send``, then a header line
    every ``every_s`` seconds when set)."""
    held: list[socket.socket] = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", box.http_port))
        if send:
            s.sendall(send)
        held.append(s)
    stop = threading.Event()

    def trickle() -> None:
        while every_s is not None and not stop.wait(every_s):
            for s in held:
                try:
                    s.sendall(b"X-Slow: 1\r\n")
                except OSError:
                    pass

    thread = threading.Thread(target=trickle)
    thread.start()
    try:
        time.sleep(3.0)
        status = http_raw(box, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", timeout=10)
        alive = sum(1 for s in held if _open(s))
    finally:
        stop.set()
        thread.join()
        for s in held:
            s.close()
    return f"/healthz: {status}; {alive} of {n} held connections still open after 3 s"


def _open(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        return s.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def http_cases(box: Box) -> dict[str, Callable[[], str]]:
    nested = b'{"input": "hi", "x": ' + b"[" * 50000 + b"]" * 50000 + b"}"
    return {
        "http_nested_json_50000": lambda: http_raw(box, speech(nested)),
        "http_speed_401_digits": lambda: http_raw(
            box, speech(b'{"input": "hi", "speed": ' + b"9" * 401 + b"}")
        ),
        "http_token_not_utf8": lambda: http_raw(
            box,
            speech(b'{"input": "hi"}').replace(
                b"Host: x\r\n", b"Host: x\r\nAuthorization: Bearer \xff\xfe\r\n"
            ),
        ),
        "http_token_latin1": lambda: http_raw(
            box,
            speech(b'{"input": "hi"}').replace(
                b"Host: x\r\n", b"Host: x\r\nAuthorization: Bearer caf\xe9\r\n"
            ),
        ),
        "http_body_never_arrives": lambda: http_raw(
            box,
            b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{",
            timeout=40,
        ),
        "http_70_idle": lambda: healthz_while_held(box, 70, b"", None),
        "http_70_slowloris": lambda: healthz_while_held(
            box, 70, b"GET / HTTP/1.1\r\nHost: x\r\n", 2.0
        ),
        "http_40_x_1MB_headers": lambda: healthz_while_held(
            box, 40, b"GET / HTTP/1.1\r\n" + b"X-Big: " + b"a" * (1 << 20), None
        ),
    }


def fd_exhaustion(out: Path) -> Result:
    """Under nofile=1024, 1 100 idle HTTP connections; then every door once."""
    box = Box(out, prefix=["prlimit", "--nofile=1024:1024"])
    try:
        before = box.rss
        held = []
        for _ in range(1100):
            try:
                held.append(socket.create_connection(("127.0.0.1", box.http_port), timeout=2))
            except OSError:
                break
        time.sleep(2.0)
        v1, _ = box.v1({"op": "ping", "id": 1}, timeout=10)
        http = http_raw(box, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", timeout=10)
        wy = wyoming(box, None)
        for s in held:
            s.close()
        lines = box.log.read_text(errors="replace").count("\n")
        answer = f"{len(held)} opened; v1 ping: {v1}; HTTP /healthz: {http}; Wyoming: {wy}"
        return {"answer": answer, "log_lines": lines, "rss_before": before, "rss_after": box.rss}
    finally:
        box.stop()


# ---------------------------------------------------------------- lexicon files


def lexicon_cases(out: Path) -> dict[str, Result]:
    results: dict[str, Result] = {}
    tmp = Path(tempfile.mkdtemp(prefix="ttsd-lexicon-"))
    deep = tmp / "deep.yaml"
    deep.write_text("en: " + "[" * 5000 + "]" * 5000 + "\n")
    box = Box(out, {"voices": {"lexicon": str(deep)}})
    results["lexicon_nested_5000_at_start"] = {
        "answer": f"exit {box.proc.poll()}" if box.proc.poll() is not None else "serving",
        "log_tail": box.log.read_text(errors="replace").strip().splitlines()[-1:],
    }
    box.stop()
    good = tmp / "good.yaml"
    good.write_text('en:\n  ttsd: {say: "tee tee ess dee"}\n')
    box = Box(out, {"voices": {"lexicon": str(good)}})
    try:
        good.write_text("en: " + "[" * 5000 + "]" * 5000 + "\n")
        box.proc.send_signal(signal.SIGHUP)
        time.sleep(2.0)
        tail = [ln for ln in box.log.read_text(errors="replace").splitlines() if "lexicon" in ln]
        results["lexicon_nested_5000_on_sighup"] = {"answer": tail[-1:] or "nothing logged"}
        good.unlink()
        os.mkfifo(good)
        box.proc.send_signal(signal.SIGHUP)
        time.sleep(3.0)
        tail = [ln for ln in box.log.read_text(errors="replace").splitlines() if "lexicon" in ln]
        ping, _ = box.v1({"op": "ping", "id": 1}, timeout=10)
        t0 = time.monotonic()
        box.stop()
        results["lexicon_fifo_on_sighup"] = {
            "answer": f"{tail[-1:]}; ping: {ping}; SIGTERM stopped it in "
            f"{time.monotonic() - t0:.1f} s (exit {box.proc.returncode})"
        }
    finally:
        box.stop()
    return results


# ---------------------------------------------------------------- all


def run(out: Path, only: set[str] | None) -> dict[str, Result]:
    results: dict[str, Result] = {}
    box = Box(out, {"limits": {"max_text_chars": 20000}})
    try:
        cases = {**v1_cases(box), **wyoming_cases(box), **http_cases(box)}
        for name, fn in cases.items():
            if only and name not in only:
                continue
            results[name] = measured(box, fn)
            print(f"{name}: {results[name]}", flush=True)
        if not only or "punctuation" in only:
            results["punctuation_19999"] = punctuation_with_pings(box)
            print(f"punctuation_19999: {results['punctuation_19999']}", flush=True)
    finally:
        box.stop()
    lexicon = {
        "lexicon_nested_5000_at_start",
        "lexicon_nested_5000_on_sighup",
        "lexicon_fifo_on_sighup",
    }
    if not only or only & lexicon:
        results.update(lexicon_cases(out))
    if not only or "fd_exhaustion" in only:
        results["fd_exhaustion"] = fd_exhaustion(out)
    return results


def format_table(results: dict[str, Result]) -> str:
    lines = ["| input | answer | took | RSS before → after |", "|---|---|---|---|"]
    for name, r in results.items():
        rss = ""
        if "rss_before" in r:
            rss = f"{r['rss_before']:.0f} → {r['rss_after']:.0f} MB"
        extra = f" (ping P99 {r['ping_p99_ms']} ms)" if "ping_p99_ms" in r else ""
        lines.append(f"| {name} | {r['answer']}{extra} | {r.get('s', '')} s | {rss} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.hostile")
    parser.add_argument("--out", default="bench-out")
    parser.add_argument("--only", nargs="*", default=None)
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results = run(out, set(args.only) if args.only else None)
    print("\n## Hostile inputs, from outside\n")
    print(format_table(results))
    (out / "hostile.json").write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
