"""Run pipecat-ai's ElevenLabsTTSService against a ttsd URL; print what crossed the wire.

Runs in the agents venv (tests/agents_venv.py), never in ttsd's: ``python
pipecat_client.py ws://127.0.0.1:PORT VOICE SCENARIO``.  Scenarios: ``speak`` (one reply
streamed in as a language model writes it) and ``interrupt`` (a long reply, the user
interrupts mid-sentence, a second reply).  The frames go through pipecat's own test
pipeline (``pipecat.tests.utils.run_test``); the service's WebSocket is wrapped so every
message sent and received is printed as a JSON line: ``{"t", "dir", "msg"}`` (audio as
its byte count), then the frames the pipeline put out (audio in base64).
"""

from __future__ import annotations

import asyncio
import base64
import json
import sys
import time
from typing import Any

from pipecat.frames.frames import (
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
    TTSTextFrame,
)
from pipecat.pipeline.worker import PipelineParams
from pipecat.services.elevenlabs.tts import ElevenLabsTTSService
from pipecat.tests.utils import SleepFrame, run_test

T0 = time.monotonic()
RATE = 16000


def log(direction: str, msg: dict[str, Any]) -> None:
    if isinstance(msg.get("audio"), str):
        msg = {**msg, "audio": len(base64.b64decode(msg["audio"]))}
    line = {"t": round(time.monotonic() - T0, 4), "dir": direction, "msg": msg}
    print(json.dumps(line), flush=True)


class Wire:
    """The service's websocket, every message logged."""

    def __init__(self, ws: Any) -> None:
        self._ws = ws

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ws, name)

    async def send(self, data: str) -> None:
        log("out", json.loads(data))
        await self._ws.send(data)

    def __aiter__(self) -> Any:
        return self._iter()

    async def _iter(self) -> Any:
        async for message in self._ws:
            log("in", json.loads(message))
            yield message


class LoggedTTS(ElevenLabsTTSService):
    async def _connect_websocket(self) -> None:
        await super()._connect_websocket()
        if self._websocket is not None and not isinstance(self._websocket, Wire):
            self._websocket = Wire(self._websocket)


def tokens(text: str) -> list[LLMTextFrame]:
    """The reply as a language model streams it: a word (and its space) a frame."""
    words = text.split(" ")
    return [LLMTextFrame(w + (" " if i < len(words) - 1 else "")) for i, w in enumerate(words)]


SPEAK = "Hello there, this is a test of streaming speech. It works quite well."
LONG = (
    "This first sentence is rather long, so that its audio is still playing when the"
    " user starts talking over it and the agent has to stop at once. And this second"
    " one never gets finished because"
)
AFTER = "Thank you very much, and have a nice day."


def scenario(name: str) -> list[Any]:
    if name == "speak":
        return [LLMFullResponseStartFrame(), *tokens(SPEAK), LLMFullResponseEndFrame(),
                SleepFrame(sleep=10.0)]  # fmt: skip
    return [LLMFullResponseStartFrame(), *tokens(LONG), SleepFrame(sleep=2.0),
            InterruptionFrame(), SleepFrame(sleep=1.0), LLMFullResponseStartFrame(),
            *tokens(AFTER), LLMFullResponseEndFrame(), SleepFrame(sleep=6.0)]  # fmt: skip


async def main(url: str, voice: str, name: str) -> None:
    tts = LoggedTTS(api_key="ttsd", voice_id=voice, url=url, sample_rate=RATE)
    down, _up = await run_test(
        tts,
        frames_to_send=scenario(name),
        pipeline_params=PipelineParams(audio_out_sample_rate=RATE),
        start_timeout=10.0,
    )
    for frame in down:
        if isinstance(frame, TTSAudioRawFrame):
            out = {"audio": base64.b64encode(frame.audio).decode(), "context": frame.context_id}
        elif isinstance(frame, TTSTextFrame):
            out = {"word": frame.text, "pts": frame.pts, "context": frame.context_id}
        else:
            continue
        print(json.dumps({"frame": out}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
