"""Voice agents (issue 45): first audio over ElevenLabs' WebSocket, beside protocol v1.

The replies and tokenizer of :mod:`bench.eager`, fed token by token at 20 and 50 tokens/s
into ``/v1/text-to-speech/{voice}/stream-input`` (the init message ``" "`` first, as
Pipecat and LiveKit send it, then one message a token, then ``""``), and into a protocol v1
``text_stream`` on the same daemon (``text_start: eager``, both doors' default).  First
audio is timed from the first token's message to the first audio message read (P50, P95
over the replies), each from a client in this process over a real socket.

``python -m bench --only agents`` (or ``python -m bench.agents``).
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from pathlib import Path
from typing import Any

from bench.eager import RATES, REPLIES, feed_v1, tokens
from bench.rig import pct

VOICE = "en_US-joe-medium"


async def feed_ws(base: str, toks: list[str], rate: float) -> tuple[float, int]:
    """(first audio ms from the first token, audio bytes) of one reply over the WebSocket."""
    import aiohttp

    url = f"{base}/v1/text-to-speech/{VOICE}/stream-input?output_format=pcm_22050"
    async with aiohttp.ClientSession() as http, http.ws_connect(url) as ws:
        await ws.send_str(json.dumps({"text": " "}))
        t0 = time.perf_counter()

        async def feed() -> None:
            for k, tok in enumerate(toks):
                await asyncio.sleep(max(0.0, t0 + k / rate - time.perf_counter()))
                await ws.send_str(json.dumps({"text": tok}))
            await ws.send_str(json.dumps({"text": ""}))

        task = asyncio.create_task(feed())
        first: float | None = None
        audio = 0
        async for msg in ws:
            m = json.loads(msg.data)
            if m.get("audio"):
                if first is None:
                    first = (time.perf_counter() - t0) * 1000
                audio += len(base64.b64decode(m["audio"]))
        await task
    assert first is not None, "no audio"
    return first, audio


def bench_agents(out: Path, quick: bool = False) -> dict[str, Any]:
    from bench.rig import free_port, start_daemon, wait_port

    replies = REPLIES[::2] if quick else REPLIES
    port = free_port()
    proc, sock = start_daemon(out, {"http": {"listen": f"127.0.0.1:{port}"}})
    base = f"http://127.0.0.1:{port}"
    result: dict[str, Any] = {"replies": len(replies), "rows": []}
    try:
        wait_port(port, proc)
        asyncio.run(feed_ws(base, tokens(REPLIES[0]), 50.0))  # warm-up
        asyncio.run(feed_v1(sock, tokens(REPLIES[0]), 50.0, "eager"))
        for rate in RATES:
            ws = [asyncio.run(feed_ws(base, tokens(r), rate))[0] for r in replies]
            v1 = [asyncio.run(feed_v1(sock, tokens(r), rate, "eager")).first_ms for r in replies]
            for door, times in (("elevenlabs websocket", ws), ("protocol v1 text_stream", v1)):
                result["rows"].append(
                    {"door": door, "rate": rate, "p50": pct(times, 50), "p95": pct(times, 95)}
                )
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    print_agents(result)
    return result


def print_agents(r: dict[str, Any]) -> None:
    print(f"\n## Voice agents: first audio from the first token, {r['replies']} replies\n")
    print("| door | tokens/s | first audio P50 | P95 |")
    print("|---|---|---|---|")
    for row in r["rows"]:
        print(f"| {row['door']} | {row['rate']:.0f} | {row['p50']:.0f} ms | {row['p95']:.0f} ms |")


if __name__ == "__main__":
    out = Path("bench-out")
    out.mkdir(exist_ok=True)
    bench_agents(out)
