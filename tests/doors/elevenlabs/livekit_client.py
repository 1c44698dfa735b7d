"""Run livekit-plugins-elevenlabs' streaming TTS against a ttsd URL; print what came back.

Runs in the agents venv (tests/agents_venv.py), never in ttsd's: ``python
livekit_client.py http://127.0.0.1:PORT VOICE``.  One reply is pushed into
``TTS.stream()`` a word at a time, as a language model writes it, then its input ends.
Prints one JSON line a frame: ``{"audio": base64 s16le, "rate", "words": [[text, start_s,
end_s], ...]}`` (the plugin's timed transcript, from ttsd's alignment), then ``{"done":
true}``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys

import aiohttp
from livekit.agents.types import USERDATA_TIMED_TRANSCRIPT
from livekit.plugins import elevenlabs

REPLY = "Hello there, this is a test of streaming speech. It works quite well."


async def main(base: str, voice: str) -> None:
    async with aiohttp.ClientSession() as session:
        tts = elevenlabs.TTS(
            api_key="ttsd",
            voice_id=voice,
            base_url=f"{base}/v1",
            encoding="pcm_16000",
            http_session=session,
        )
        stream = tts.stream()
        words = REPLY.split(" ")
        for i, w in enumerate(words):
            stream.push_text(w + (" " if i < len(words) - 1 else ""))
            await asyncio.sleep(0.02)
        stream.end_input()
        async for ev in stream:
            frame = ev.frame
            timed = frame.userdata.get(USERDATA_TIMED_TRANSCRIPT, [])
            out = {
                "audio": base64.b64encode(bytes(frame.data.cast("B"))).decode(),
                "rate": frame.sample_rate,
                "words": [[str(t), t.start_time, t.end_time] for t in timed],
            }
            print(json.dumps(out), flush=True)
        await stream.aclose()
        await tts.aclose()
    print(json.dumps({"done": True}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:3]))
