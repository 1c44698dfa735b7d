"""The cancel tail on every door (issue 45, part 3): a client cancels a long request after
its first chunks; how much audio still reaches it after the cancel was sent (in flight:
what the door had sent before it read the cancel, and anything after), how much after the
door had read it (the goal: at most 20 ms), how long until the last of it, and how long
until the request's end.  "Read" is told by an answer the door sends as it reads: v1's
``cancelled``, a ``pong`` to a ping sent right after the cancel (Wyoming's event, the
WebSocket's frame: each door reads in order), speech-dispatcher's ``703``.

- protocol v1: ``cancel`` (real-time and as-fast-as-read);
- the ElevenLabs WebSocket: ``close_context`` mid-sentence (``multi-stream-input``), end
  = its ``isFinal``;
- Wyoming: a new ``synthesize`` while one speaks, end = the old one's ``audio-stop``;
- speech-dispatcher (``sd_ttsd`` on a pipe, as the server drives it): ``STOP``, end =
  ``703``;
- HTTP (``/v1/audio/speech``, raw PCM): the client disconnects; there is no one to send
  to, so its row is the time until the daemon's ``stats`` shows the stream gone.

Each client reads as fast as it can (the tail is then what was in flight on the wire),
on one daemon with every door::

    python -m bench.bargein [--runs N] [--out DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import queue
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from appliance.clients.client import Client
from bench.rig import free_port, start_daemon, wait_port

TEXT = (
    "Our records show that the parcel left the depot this morning and is now on its way. "
    "The driver expects to reach your street between two and four in the afternoon, and "
    "you will get a message about half an hour before the van arrives at your door."
)
VOICE = "en_US-joe-medium"
RATE = 22050
"""The bundled voice's rate: every door here sends it as s16le mono."""
AFTER_CHUNKS = 3
"""Audio messages read before the cancel."""
Row = dict[str, float]


class Tail:
    """What one request's client saw after its cancel: audio bytes after the cancel was
    sent (in flight: sent before the door read it, or after) and after the door had read
    it (an answer the door sends on reading it came first), and when."""

    def __init__(self) -> None:
        self.t_cancel = self.t_read = self.t_last = 0.0
        self.sent_bytes = self.read_bytes = 0

    def cancel(self) -> None:
        self.t_cancel = time.perf_counter()

    def read(self) -> None:
        """The door's answer to the cancel (or to what was sent right after it) arrived."""
        if not self.t_read:
            self.t_read = time.perf_counter()

    def audio(self, n: int) -> None:
        if self.t_cancel:
            self.sent_bytes += n
            self.t_last = time.perf_counter()
            if self.t_read:
                self.read_bytes += n

    def row(self) -> Row:
        t_end = time.perf_counter()
        return {
            "in_flight_ms": self.sent_bytes / 2 / RATE * 1000,
            "after_read_ms": self.read_bytes / 2 / RATE * 1000,
            "bytes_after_read": float(self.read_bytes),
            "last_audio_ms": (self.t_last - self.t_cancel) * 1000 if self.t_last else 0.0,
            "end_ms": (t_end - self.t_cancel) * 1000,
        }


def v1_one(client: Client, rid: int, realtime: bool) -> Row:
    """``cancel`` after the third chunk; read: its ``cancelled`` answer."""
    client.send({"op": "synthesize", "id": rid, "text": TEXT, "realtime": realtime})
    seen = 0
    tail = Tail()
    while True:
        ev = client.recv()
        if ev.get("id") == rid + 100000:
            tail.read()
        if ev.get("id") != rid:
            continue
        if ev["event"] == "chunk":
            seen += 1
            tail.audio(len(ev["audio"]))
            if seen == AFTER_CHUNKS:
                client.send({"op": "cancel", "id": rid + 100000, "target": rid})
                tail.cancel()
        elif ev["event"] in ("end", "error"):
            return tail.row()


async def ws_one(base: str, k: int) -> Row:
    """``close_context`` mid-sentence after the third audio message, then a WebSocket ping;
    read: its pong (the server reads messages in order, and answers a ping as it reads it)."""
    import aiohttp

    url = f"{base}/v1/text-to-speech/{VOICE}/multi-stream-input?output_format=pcm_22050"
    cid = f"turn{k}"
    async with aiohttp.ClientSession() as http, http.ws_connect(url, autoping=False) as ws:
        await ws.send_str(json.dumps({"text": TEXT, "context_id": cid, "flush": True}))
        await ws.send_str(json.dumps({"text": " and then", "context_id": cid}))
        seen = 0
        tail = Tail()
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.PONG:
                tail.read()
                continue
            m = json.loads(msg.data)
            if m.get("audio"):
                seen += 1
                tail.audio(len(base64.b64decode(m["audio"])))
                if seen == AFTER_CHUNKS:
                    await ws.send_str(json.dumps({"context_id": cid, "close_context": True}))
                    tail.cancel()
                    await ws.ping()
            elif m.get("isFinal"):
                row = tail.row()
                await ws.send_str(json.dumps({"close_socket": True}))
                return row
    raise RuntimeError("the socket closed before isFinal")


async def wyoming_one(port: int) -> Row:
    """A new ``synthesize`` after the third chunk, then a ``ping``; read: its ``pong``
    (the reader answers it at once, after reading the synthesize)."""
    from wyoming.audio import AudioChunk, AudioStop
    from wyoming.client import AsyncTcpClient
    from wyoming.ping import Ping, Pong
    from wyoming.tts import Synthesize

    async with AsyncTcpClient("127.0.0.1", port) as c:
        await c.write_event(Synthesize(text=TEXT).event())
        seen = 0
        tail = Tail()
        while True:
            ev = await c.read_event()
            if ev is None:
                raise RuntimeError("wyoming closed")
            if Pong.is_type(ev.type):
                tail.read()
            elif AudioChunk.is_type(ev.type):
                seen += 1
                tail.audio(len(AudioChunk.from_event(ev).audio))
                if seen == AFTER_CHUNKS:
                    await c.write_event(Synthesize(text="Yes.").event())
                    tail.cancel()
                    await c.write_event(Ping().event())
            elif AudioStop.is_type(ev.type):
                return tail.row()


def speechd_rows(sock: str, runs: int) -> list[Row]:
    """``sd_ttsd`` on a pipe: SPEAK, STOP after the third 705 block."""
    from bench.speechd import Module, _speak

    conf = Path(tempfile.mkdtemp(prefix="ttsd-bench-spd-")) / "ttsd.conf"
    conf.write_text(f'TtsdSocket "{sock}"\nLogLevel 1\n')
    env = {k: v for k, v in os.environ.items() if k != "TTSD_SOCKET"}
    m = Module([sys.executable, "-m", "appliance.clients.speechd.module", str(conf)], env)
    rows: list[Row] = []
    try:
        m.init(server_audio=True)
        for _ in range(runs):
            _speak(m, TEXT)
            for _k in range(AFTER_CHUNKS):
                m.wait((705,))
            tail = Tail()
            m.send("STOP\n")
            tail.cancel()
            while True:
                line = m.wait((705, 702, 703), timeout=0.5 if tail.t_read else 120.0)
                if line.code != 705:
                    tail.read()  # 703: said as STOP is read; after it, nothing may come
                    break
                # A 705 block is BLOCK_MS of audio at most: each is counted as 200 ms (an
                # upper bound: the module's blocks are that long but the last).
                tail.audio(RATE * 2 // 5)
            row = tail.row()
            with contextlib.suppress(TimeoutError, queue.Empty):
                while m.wait((705,), timeout=0.5):  # a block after the 703: a bug
                    row["after_read_ms"] += 200.0
                    row["bytes_after_read"] += RATE * 2 // 5
            rows.append(row)
            m.drain(0.2)
    finally:
        m.close()
    return rows


async def http_one(base: str, sock: str) -> Row:
    """Disconnect after the first bytes; the time until ``stats`` shows no http stream."""
    import aiohttp

    body = {"input": TEXT, "voice": VOICE, "response_format": "pcm"}
    async with aiohttp.ClientSession() as s:
        r = await s.post(f"{base}/v1/audio/speech", json=body)
        await r.content.readany()
        r.close()
        tail = Tail()
        tail.cancel()
    with Client(sock) as c:
        while any(st.get("frontend") == "http" for st in c.request("stats").get("streams", [])):
            await asyncio.sleep(0.005)
    return tail.row()


def _summary(rows: list[Row]) -> dict[str, tuple[float, float]]:
    return {
        key: (statistics.median(r[key] for r in rows), max(r[key] for r in rows)) for key in rows[0]
    }


def bench_bargein(out: Path, runs: int = 10) -> dict[str, Any]:
    http_port, wy_port = free_port(), free_port()
    proc, sock = start_daemon(
        out,
        {
            "http": {"listen": f"127.0.0.1:{http_port}"},
            "wyoming": {"uri": f"tcp://127.0.0.1:{wy_port}"},
        },
    )
    base = f"http://127.0.0.1:{http_port}"
    result: dict[str, Any] = {}
    try:
        wait_port(http_port, proc)
        wait_port(wy_port, proc)
        with Client(sock) as client:
            for realtime in (True, False):
                rows = [v1_one(client, k + 1, realtime) for k in range(runs)]
                name = "v1 cancel, " + ("realtime" if realtime else "as fast as read")
                result[name] = _summary(rows)
        rows = [asyncio.run(ws_one(base, k)) for k in range(runs)]
        result["elevenlabs close_context"] = _summary(rows)
        rows = [asyncio.run(wyoming_one(wy_port)) for _ in range(runs)]
        result["wyoming new synthesize"] = _summary(rows)
        result["speechd STOP (705 blocks ≤ 200 ms)"] = _summary(speechd_rows(sock, runs))
        rows = [asyncio.run(http_one(base, sock)) for _ in range(runs)]
        result["http disconnect (stream gone)"] = _summary(rows)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    print_bargein(result, runs)
    return result


def print_bargein(result: dict[str, Any], runs: int) -> None:
    print(f"\n## Cancel tail on every door (median / max over {runs} runs)\n")
    print(
        "| door, cancel | audio after it was sent (ms) | after it was read (ms) | bytes"
        " | last audio after (ms) | end after (ms) |"
    )
    print("|---|---|---|---|---|---|")
    for name, r in result.items():
        cells = " | ".join(f"{m:.0f} / {x:.0f}" for m, x in r.values())
        print(f"| {name} | {cells} |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m bench.bargein")
    parser.add_argument("--out", type=Path, default=Path("bench-out"))
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    bench_bargein(args.out, args.runs)
