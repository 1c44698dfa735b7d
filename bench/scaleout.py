"""Scale-out behind HAProxy (issue 33, docs/scale-out.md): two real daemons, the real
``haproxy`` running ``systemd/haproxy.cfg.example`` with loopback addresses, and three
scenarios whose figures ``python -m bench --only scaleout`` prints and
tests/scaleout/test_haproxy.py asserts on.

- **saturated** — box1 is filled by clients of its own (straight to its HTTP door, never
  reading, so their streams keep producing) until its agent says ``drain``; then requests
  through HAProxy: all must reach box2, none ``busy``.  Then box1 is emptied and comes
  back.
- **drain** — listeners reading at 1x on both boxes; box1 gets SIGTERM: its streams end
  whole, new requests (sent every 0.25 s) go to box2 once HAProxy read the drain.
- **kill** — listeners on both boxes; box1 gets SIGKILL: its streams end truncated (the
  client sees an error, none silent), box2's end whole, new requests are served by box2.

The rig owns nothing of a box's life: a scenario gets callables that stop or kill it.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.rig import free_port

REPO = Path(__file__).resolve().parent.parent
TEMPLATE = REPO / "systemd" / "haproxy.cfg.example"
BYTES_PER_S = 22050 * 2
"""16-bit mono PCM at the bundled voice's rate: what a listener reads per second."""
SHORT = "Your call is important to us."
LONG = (
    "Thank you for calling. All of our agents are busy helping other customers right now, "
    "so please stay on the line: the next available agent will be with you shortly."
)
"""About eight seconds of audio: a listener's stream outlasts the drain notice (1.5 s)."""
NEWCOMERS_MAX_S = 60.0
"""The most a scenario sends newcomers for, however slow the runner."""
FILLER = "This stream only fills the box and is never read to its end. " * 60


@dataclass
class Box:
    name: str
    http_port: int = field(default_factory=free_port)
    agent_port: int = field(default_factory=free_port)
    wyoming_port: int = field(default_factory=free_port)

    def config(self) -> dict[str, Any]:
        """The daemon config of this box (the test and the bench add their own limits)."""
        return {
            "http": {"listen": f"127.0.0.1:{self.http_port}"},
            "agent": {"listen": f"127.0.0.1:{self.agent_port}", "timeout_s": 1.0},
            "wyoming": {"uri": f"tcp://127.0.0.1:{self.wyoming_port}"},
            # Room for a few listeners even when the CPUs are shared (the bench and the
            # test run both boxes and HAProxy on one machine): a box's capacity is its
            # measured cost, which contention inflates.
            "scheduler": {"admission_max_load": 1.0, "admission_backlog_ms": 3000.0},
            "limits": {
                "drain_notice_s": 1.5,
                "shutdown_timeout_s": 30.0,
                # Small output bounds: a client that does not read holds its stream.
                "max_output_buffer_bytes": 65536,
                "client_too_slow_s": 60.0,
                # A box idle on a fast machine projects room for 100+ streams; filling that
                # would take the HTTP door's connections and the test's time.
                "max_streams": 40,
            },
        }

    def readiness(self) -> dict[str, Any]:
        """``/readyz``: the same answer as the agent's, with its reason."""
        import json
        import urllib.error
        import urllib.request

        url = f"http://127.0.0.1:{self.http_port}/readyz"
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                body: dict[str, Any] = json.load(r)
        except urllib.error.HTTPError as exc:
            body = json.load(exc)
        return body

    def agent(self, timeout: float = 2.0) -> str:
        """What HAProxy's agent check reads now."""
        with socket.create_connection(("127.0.0.1", self.agent_port), timeout=timeout) as s:
            data = b""
            while not data.endswith(b"\n"):
                got = s.recv(256)
                if not got:
                    break
                data += got
        return data.decode("ascii", "replace").strip()


# ---------------------------------------------------------------- HAProxy


def haproxy_config(boxes: list[Box], http_port: int, wyoming_port: int, stats: Path) -> str:
    """``systemd/haproxy.cfg.example`` with the boxes' loopback ports, run in the
    foreground as this user (no chroot, user, group, daemon)."""
    out: list[str] = []
    for line in TEMPLATE.read_text().splitlines():
        word = line.split()[0] if line.split() else ""
        if word in ("chroot", "user", "group", "daemon") or line.strip().startswith("log /"):
            continue
        line = line.replace("/run/haproxy/admin.sock", str(stats))
        line = line.replace("bind :8880", f"bind 127.0.0.1:{http_port}")
        line = line.replace("bind :10200", f"bind 127.0.0.1:{wyoming_port}")
        for i, box in enumerate(boxes, 1):
            if f"server box{i} " not in line:
                continue
            addr = f"10.0.0.{10 + i}"
            line = line.replace(f"{addr}:8880", f"127.0.0.1:{box.http_port}")
            line = line.replace(f"{addr}:10200", f"127.0.0.1:{box.wyoming_port}")
            line = line.replace("agent-port 8881", f"agent-port {box.agent_port}")
            line = line.replace(" port 8880", f" port {box.http_port}")
        out.append(line)
    text = "\n".join(out) + "\n"
    if re.search(r"10\.0\.0\.\d+", text.split("defaults", 1)[1]):
        raise ValueError("haproxy template: a server line was not rewritten")
    return text


class HAProxy:
    """The real ``haproxy`` on loopback; :meth:`servers` reads its view of the boxes."""

    def __init__(self, boxes: list[Box], workdir: Path | None = None) -> None:
        self.dir = workdir or Path(tempfile.mkdtemp(prefix="ttsd-haproxy-"))
        self.http_port = free_port()
        self.wyoming_port = free_port()
        self.stats = self.dir / "admin.sock"
        self.cfg = self.dir / "haproxy.cfg"
        self.cfg.write_text(haproxy_config(boxes, self.http_port, self.wyoming_port, self.stats))
        self.log = self.dir / "haproxy.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 20.0) -> None:
        with self.log.open("wb") as logf:
            self.proc = subprocess.Popen(
                ["haproxy", "-db", "-f", str(self.cfg)], stdout=logf, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + timeout
        while not self.stats.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"haproxy did not start:\n{self.log.read_text()}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def command(self, cmd: str) -> str:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(5.0)
            s.connect(str(self.stats))
            s.sendall(cmd.encode() + b"\n")
            chunks = []
            while chunk := s.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def servers(self, backend: str = "ttsd_http") -> dict[str, dict[str, str]]:
        """``show stat`` for ``backend``'s servers: status (UP, DRAIN, DOWN …), weight."""
        text = self.command("show stat").lstrip("# ")
        rows = csv.DictReader(io.StringIO(text))
        return {
            r["svname"]: r
            for r in rows
            if r["pxname"] == backend and r["svname"] not in ("FRONTEND", "BACKEND")
        }

    def wait(
        self,
        server: str,
        want: Callable[[dict[str, str]], bool],
        timeout: float,
        backend: str = "ttsd_http",
    ) -> float:
        """Seconds until ``want`` holds for ``server``'s row; TimeoutError past ``timeout``."""
        t0 = time.monotonic()
        while True:
            row = self.servers(backend).get(server, {})
            if row and want(row):
                return time.monotonic() - t0
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"haproxy: {server} is {row.get('status')} after {timeout} s")
            time.sleep(0.05)


def status(row: dict[str, str]) -> str:
    """``UP``, ``DRAIN``, ``DOWN``, ``MAINT`` … (HAProxy adds who set it: ``DRAIN (agent)``)."""
    return (row.get("status") or "").split(" ")[0]


def up(row: dict[str, str]) -> bool:
    return status(row) == "UP" and int(row.get("weight") or 0) > 0


def drained(row: dict[str, str]) -> bool:
    return status(row) in ("DRAIN", "DOWN", "MAINT") or int(row.get("weight") or 0) == 0


def down(row: dict[str, str]) -> bool:
    return status(row) == "DOWN"


# ---------------------------------------------------------------- clients


@dataclass
class Result:
    sent_at: float
    status: int = 0
    box: str = ""
    complete: bool = False
    error: str = ""
    audio_bytes: int = 0


async def speech(
    port: int, text: str, paced: bool, t0: float, paced_s: float = float("inf")
) -> Result:
    """One POST /v1/audio/speech through ``port``, its PCM read whole (at 1x when
    ``paced``, as a caller listens, for its first ``paced_s`` seconds); a truncated stream
    is an error, never silent."""
    import aiohttp

    r = Result(sent_at=time.monotonic() - t0)
    body = {"model": "tts-1", "input": text, "voice": "alloy", "response_format": "pcm"}
    timeout = aiohttp.ClientTimeout(total=120, sock_read=30)
    connector = aiohttp.TCPConnector(force_close=True)
    try:
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            async with session.post(f"http://127.0.0.1:{port}/v1/audio/speech", json=body) as resp:
                r.status, r.box = resp.status, resp.headers.get("X-TTSD-Box", "")
                if resp.status != 200:
                    r.error = (await resp.text())[:200]
                    return r
                started = time.monotonic()
                async for chunk in resp.content.iter_chunked(8192):
                    r.audio_bytes += len(chunk)
                    if paced and time.monotonic() - started < paced_s:
                        # Hold at most half a second ahead of the listener.
                        ahead = r.audio_bytes / BYTES_PER_S - (time.monotonic() - started)
                        if ahead > 0.5:
                            await asyncio.sleep(ahead - 0.5)
                r.complete = True
    except (TimeoutError, aiohttp.ClientError, ConnectionError) as exc:
        r.error = f"{type(exc).__name__}: {exc}"[:200]
    return r


def fill(box: Box, text: str = FILLER) -> socket.socket:
    """A client of box's own that asks for a long stream and never reads it."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", box.http_port))
    import json

    body = json.dumps({"model": "tts-1", "input": text, "response_format": "pcm"}).encode()
    head = (
        f"POST /v1/audio/speech HTTP/1.1\r\nHost: box\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    s.sendall(head + body)
    return s


def tally(results: list[Result]) -> dict[str, Any]:
    boxes: dict[str, int] = {}
    for r in results:
        if r.complete:
            boxes[r.box] = boxes.get(r.box, 0) + 1
    return {
        "sent": len(results),
        "served": boxes,
        "busy": sum(1 for r in results if r.status == 429),
        "errors": sum(1 for r in results if not r.complete and r.status != 429),
        "failures": [
            f"{r.status} {r.box or '-'} {r.error[:80]}" for r in results if not r.complete
        ][:8],
    }


# ---------------------------------------------------------------- scenarios


def top_up(hx: HAProxy, box: Box, fillers: list[socket.socket], max_fill: int) -> float:
    """Fill ``box`` until its agent says ``drain``; seconds from the agent's first
    ``drain`` until HAProxy shows the box out of rotation."""
    first: float | None = None
    while True:
        for _ in range(6):  # the filler's effect, looked at every 50 ms
            if box.agent().startswith("up drain"):
                first = first or time.monotonic()
                break
            time.sleep(0.05)
        if first is not None:
            # A box right at its bound may have room again at the next check: then
            # one more filler.
            with contextlib.suppress(TimeoutError):
                hx.wait(box.name, drained, 2.0)
                return time.monotonic() - first
        if len(fillers) >= max_fill:
            raise RuntimeError(f"{box.name} still has room after {max_fill} streams")
        # As many as the agent says there is room for (weight × capacity), at least one.
        m = re.match(r"up ready (\d+)% maxconn:(\d+)", box.agent())
        room = int(m.group(1)) * int(m.group(2)) // 100 if m else 1
        for _ in range(max(1, min(room - 1, max_fill - len(fillers)))):
            fillers.append(fill(box))


def saturated(
    hx: HAProxy, box1: Box, box2: Box, requests: int = 6, max_fill: int = 90
) -> dict[str, Any]:
    """(a) box1 kept full by clients of its own → HAProxy's new requests all go to box2.
    Then box2 full too → HAProxy's own answer, 503 ``busy`` with Retry-After.

    A box's room is its measured cost, which moves (contention, the fillers' own
    figures): before each request box1 is topped up until its agent says ``drain`` and
    HAProxy shows it out of rotation."""
    fillers: list[socket.socket] = []
    reroute: list[float] = []
    results: list[Result] = []
    t0 = time.monotonic()
    try:
        for _ in range(requests):
            reroute.append(top_up(hx, box1, fillers, max_fill))
            results.append(asyncio.run(speech(hx.http_port, SHORT, paced=False, t0=t0)))
        reason = box1.readiness().get("reason", "")
        top_up(hx, box2, fillers, max_fill)
        top_up(hx, box1, fillers, max_fill)
        full = asyncio.run(speech(hx.http_port, SHORT, paced=False, t0=t0))
    finally:
        for s in fillers:
            with contextlib.suppress(OSError):
                s.close()
    back_s = max(hx.wait("box1", up, 30.0), hx.wait("box2", up, 30.0))
    return {
        **tally(results),
        "fillers": len(fillers),
        "reroute_s": round(reroute[0], 2),
        "back_in_rotation_s": round(back_s, 2),
        "all_full": f"{full.status} {full.error[:120]}",
        "box1_full_because": reason,
    }


async def _both_up(hx: HAProxy, timeout: float = 30.0) -> None:
    """Both boxes in rotation: a scenario before starts from a box still catching up
    (admission's backlog window) otherwise."""
    loop = asyncio.get_running_loop()
    for name in ("box1", "box2"):
        await loop.run_in_executor(None, hx.wait, name, up, timeout)


async def _listeners(
    hx: HAProxy, n: int, t0: float, text: str = LONG, paced_s: float = float("inf")
) -> list[asyncio.Task[Result]]:
    tasks = []
    for _ in range(n):
        talk = speech(hx.http_port, text, paced=True, t0=t0, paced_s=paced_s)
        tasks.append(asyncio.create_task(talk))
        await asyncio.sleep(0.1)  # leastconn sees each one before the next
    return tasks


async def _newcomers(
    hx: HAProxy, seconds: float, t0: float, seen: asyncio.Future[float], after: int = 2
) -> list[Result]:
    """Short requests one after another for ``seconds``, and on until ``after`` of them
    were sent once HAProxy saw box1 leave (``seen``): on a slow runner one short request
    took the whole 3 s, and the only newcomer went out before the drain was seen, which
    showed nothing about where new work goes (bounded: ``NEWCOMERS_MAX_S``)."""
    out: list[Result] = []
    t_start = time.monotonic()
    sent_after = 0
    while time.monotonic() - t_start < NEWCOMERS_MAX_S:
        elapsed = time.monotonic() - t_start
        if elapsed >= seconds and seen.done() and sent_after >= after:
            break
        counts = seen.done()
        out.append(await speech(hx.http_port, SHORT, paced=False, t0=t0))
        sent_after += counts
        await asyncio.sleep(0.25)
    return out


async def _drain(
    hx: HAProxy, box1: Box, stop_box1: Callable[[], int], listeners: int
) -> dict[str, Any]:
    await _both_up(hx)
    t0 = time.monotonic()
    streams = await _listeners(hx, listeners, t0)
    await asyncio.sleep(2.0)  # audio flowing on both boxes
    loop = asyncio.get_running_loop()
    before = (status(hx.servers()["box1"]), await loop.run_in_executor(None, box1.agent))
    t_term = time.monotonic() - t0
    exit_code = loop.run_in_executor(None, stop_box1)
    seen = loop.run_in_executor(None, hx.wait, "box1", drained, 5.0)
    newcomers = await _newcomers(hx, 3.0, t0, seen)
    reroute_s = await seen
    done = await asyncio.gather(*streams)
    on_box1 = [r for r in done if r.box == "box1"]
    return {
        "listeners": tally(done),
        "box1_streams": len(on_box1),
        "box1_streams_whole": sum(1 for r in on_box1 if r.complete),
        "new": tally(newcomers),
        "new_on_box1_after_drain": sum(
            1 for r in newcomers if r.box == "box1" and r.sent_at > t_term + reroute_s
        ),
        "reroute_s": round(reroute_s, 2),
        "box1_exit": await exit_code,
        "box1_before": before,
    }


def drain(
    hx: HAProxy, box1: Box, stop_box1: Callable[[], int], listeners: int = 4
) -> dict[str, Any]:
    """(c) SIGTERM box1 under load: its streams end whole, new work goes to box2."""
    return asyncio.run(_drain(hx, box1, stop_box1, listeners))


async def _kill(hx: HAProxy, kill_box1: Callable[[], None], listeners: int) -> dict[str, Any]:
    await _both_up(hx)
    t0 = time.monotonic()
    # Half a minute of audio, killed a second in: box1 is still producing it however fast
    # the machine (else its streams were whole before the kill).  Read at 1x for 4 s, then
    # as fast as it comes, so box2's end soon.
    streams = await _listeners(hx, listeners, t0, LONG * 4, paced_s=4.0)
    await asyncio.sleep(1.0)
    kill_box1()
    t_kill = time.monotonic()
    loop = asyncio.get_running_loop()
    seen = loop.run_in_executor(None, hx.wait, "box1", down, 10.0)
    newcomers = await _newcomers(hx, 3.0, t0, seen)
    first_ok = next((r.sent_at for r in newcomers if r.complete), None)
    down_s = await seen
    done = await asyncio.gather(*streams)
    on_box1 = [r for r in done if r.box == "box1"]
    return {
        "listeners": tally(done),
        "box1_streams": len(on_box1),
        "box1_streams_errored": sum(1 for r in on_box1 if r.error and not r.complete),
        "box2_streams_whole": sum(1 for r in done if r.box == "box2" and r.complete),
        "new": tally(newcomers),
        "first_new_served_s": (
            round(first_ok - (t_kill - t0), 2) if first_ok is not None else None
        ),
        "marked_down_s": round(down_s, 2),
    }


def kill(hx: HAProxy, kill_box1: Callable[[], None], listeners: int = 4) -> dict[str, Any]:
    """(b) SIGKILL box1 under load: only its streams are lost, each one an error."""
    return asyncio.run(_kill(hx, kill_box1, listeners))


# ---------------------------------------------------------------- the bench item


def _start_box(out: Path, box: Box) -> subprocess.Popen[bytes]:
    from bench.rig import start_daemon

    proc, _sock = start_daemon(out, box.config())
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if box.agent().startswith("up ready"):
                return proc
        time.sleep(0.2)
    raise RuntimeError(f"{box.name} did not become ready")


def bench_scaleout(out: Path) -> dict[str, Any]:
    import shutil

    if shutil.which("haproxy") is None:
        raise RuntimeError("haproxy is not installed (apt-get install haproxy)")
    boxes = [Box("box1"), Box("box2")]
    procs = {b.name: _start_box(out, b) for b in boxes}
    hx = HAProxy(boxes)
    hx.start()
    results: dict[str, Any] = {}
    try:
        for b in boxes:
            hx.wait(b.name, up, 30.0)
        results["saturated"] = saturated(hx, boxes[0], boxes[1])

        def stop_box1() -> int:
            p = procs["box1"]
            p.send_signal(signal.SIGTERM)
            return p.wait(timeout=60)

        results["drain"] = drain(hx, boxes[0], stop_box1)
        procs["box1"] = _start_box(out, boxes[0])
        hx.wait("box1", up, 30.0)
        results["kill"] = kill(hx, lambda: os.kill(procs["box1"].pid, signal.SIGKILL))
    finally:
        hx.stop()
        for p in procs.values():
            if p.poll() is None:
                p.terminate()
                p.wait(timeout=60)
    print_scaleout(results)
    return results


def print_scaleout(r: dict[str, Any]) -> None:
    print("\n## Scale-out behind HAProxy (two boxes on loopback)\n")
    print("| scenario | sent | served box1/box2 | busy | errors | re-route |")
    print("|---|---|---|---|---|---|")
    rows = []
    if "saturated" in r:
        s = r["saturated"]
        rows.append(("(a) box1 saturated: new requests", s, f"{s['reroute_s']} s to DRAIN"))
    if "drain" in r:
        d = r["drain"]
        rows.append(("(c) box1 drained: streams in flight", d["listeners"], ""))
        rows.append(("(c) box1 drained: new requests", d["new"], f"{d['reroute_s']} s to DRAIN"))
    if "kill" in r:
        k = r["kill"]
        rows.append(("(b) box1 killed: streams in flight", k["listeners"], ""))
        rows.append(
            (
                "(b) box1 killed: new requests",
                k["new"],
                f"first served {k['first_new_served_s']} s, DOWN {k['marked_down_s']} s",
            )
        )
    for name, t, note in rows:
        served = t.get("served", {})
        print(
            f"| {name} | {t['sent']} | {served.get('box1', 0)}/{served.get('box2', 0)} "
            f"| {t['busy']} | {t['errors']} | {note} |"
        )
