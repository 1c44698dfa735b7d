"""Time to first audio byte over HTTP beside protocol v1's, in the same run.

One daemon serves both doors.  Requests alternate between them (v1 over the Unix
socket with the client library, HTTP over a keep-alive loopback connection with the
standard library's client), so both see the same machine load.  HTTP's figure runs
from writing the request to reading the first body byte of a ``pcm`` response (the
headers leave with the first chunk); v1's from writing ``synthesize`` to reading the
first ``chunk`` event.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
from pathlib import Path
from typing import Any

from bench.rig import pct


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def http_first_byte(conn: http.client.HTTPConnection, text: str) -> float:
    """ms from sending the request to the first audio byte; reads the rest."""
    body = json.dumps({"model": "tts-1", "input": text, "voice": "alloy", "response_format": "pcm"})
    t0 = time.perf_counter()
    conn.request("POST", "/v1/audio/speech", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    if resp.status != 200:
        raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:200]!r}")
    first = resp.read(1)
    t_first = time.perf_counter() - t0
    resp.read()
    if not first:
        raise RuntimeError("empty response")
    return t_first * 1000


def v1_first_chunk(client: Any, rid: int, text: str) -> float:
    from bench.rig import v1_request

    return v1_request(client, rid, text)[0]


def bench_http(out: Path, runs: int, texts: dict[str, str]) -> dict[str, Any]:
    from appliance.clients.client import Client
    from bench.rig import start_daemon

    port = _free_port()
    proc, sock = start_daemon(out, {"http": {"listen": f"127.0.0.1:{port}"}})
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        client = Client(sock)
        rows: dict[str, Any] = {}
        rid = 0
        try:
            for name, text in texts.items():
                v1: list[float] = []
                over_http: list[float] = []
                for i in range(runs + 2):
                    rid += 1
                    a = v1_first_chunk(client, rid, text)
                    b = http_first_byte(conn, text)
                    if i >= 2:  # the first two are warm-up
                        v1.append(a)
                        over_http.append(b)
                rows[name] = {
                    "v1_p50_ms": pct(v1, 50),
                    "v1_p95_ms": pct(v1, 95),
                    "http_p50_ms": pct(over_http, 50),
                    "http_p95_ms": pct(over_http, 95),
                    "delta_p50_ms": pct(over_http, 50) - pct(v1, 50),
                    "runs": len(v1),
                }
        finally:
            client.close()
            conn.close()
        return rows
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def print_http(rows: dict[str, Any]) -> None:
    print("\n## Time to first audio byte: HTTP vs protocol v1 (same daemon, alternating)\n")
    print("| text | v1 P50 | v1 P95 | HTTP P50 | HTTP P95 | HTTP − v1 (P50) |")
    print("|---|---|---|---|---|---|")
    for name, r in rows.items():
        print(
            f"| {name} | {r['v1_p50_ms']:.1f} ms | {r['v1_p95_ms']:.1f} ms "
            f"| {r['http_p50_ms']:.1f} ms | {r['http_p95_ms']:.1f} ms "
            f"| {r['delta_p50_ms']:+.1f} ms |"
        )
