"""One streamed speech reply: each chunk encoded, framed and written under the doors'
too-slow rule.

What it adds to the frame: the frame's :class:`~appliance.doors.net.Outbox` bounds what
a client holds; here each of a stream's chunks becomes HTTP body bytes (chunked
transfer), in one of three framings:

- **audio**: the encoder's bytes (``response_format``), raw formats optionally paced into
  frames of exactly ``pace_ms`` on the real-time clock (:mod:`appliance.doors.pace`);
- **SSE** (``stream_format: sse``): ``speech.audio.delta`` events (base64), ttsd's
  ``ttsd.speech.word`` / ``ttsd.speech.visemes`` events, then ``speech.audio.done``
  with its usage;
- **NDJSON** (Kokoro's streamed ``/dev/captioned_speech``): a JSON line per chunk, its
  words' timestamps with it.

MP3, Opus and the other libsndfile codecs encode in the door's worker pool (a few ms per
chunk), never on the loop.  A client lost while writing (``too_slow`` or gone) cancels the
stream; :meth:`AudioSink.lost` then raises it, for the request's one ending.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aiohttp import web

from appliance.core.service import Stream
from appliance.doors import captions
from appliance.doors.formats import Encoder, PcmOut, SoundfileOut
from appliance.doors.http.request import SpeechBody
from appliance.doors.net import ClientTooSlow, Outbox
from appliance.doors.pace import PacedFrame, PacedSends, Pacer
from appliance.errors import ErrorCode, ServiceError
from appliance.ops.config import LimitsConfig
from appliance.speech import Chunk, Viseme, Word

log = logging.getLogger("appliance.doors.http")


class AudioSink:
    """One speech response as its stream's ``emit``: encodes each chunk, frames it (raw
    bytes or SSE events), writes it under the doors' one too-slow rule
    (:class:`~appliance.doors.net.Outbox`), and remembers why the client was lost."""

    def __init__(
        self,
        request: web.Request,
        body: SpeechBody,
        stream: Stream,
        encoder: Encoder,
        pool: ThreadPoolExecutor | None,
        limits: Callable[[], LimitsConfig],
        ndjson: bool = False,
        paced: PacedSends | None = None,
    ) -> None:
        self.request, self.body, self.stream, self.encoder = request, body, stream, encoder
        self._pool = pool
        self._loop = asyncio.get_running_loop()
        self.sse = body.stream_format == "sse" and not ndjson
        self.ndjson = ndjson
        """Kokoro's streamed captioned speech: a JSON line per chunk, its words with it."""
        self._words: tuple[Word, ...] = ()
        self._visemes: tuple[Viseme, ...] = ()
        """The chunk's visemes (``visemes``), sent with its audio."""
        kind = "text/event-stream" if self.sse else encoder.content_type
        self.resp = web.StreamResponse(
            status=200,
            headers={
                "Content-Type": "application/x-ndjson" if ndjson else kind,
                "Cache-Control": "no-cache",
                **audio_headers(body, stream, encoder.sample_rate),
            },
        )
        self.resp.enable_chunked_encoding()
        assert request.transport is not None
        self.outbox = Outbox(request.transport, limits)
        self.deltas = 0
        self.first = True
        self.gone: str | None = None
        """Why the client is lost ("too_slow", "disconnect"), once it is."""
        self.pacer: Pacer[None] | None = None
        if body.pace_ms is not None and isinstance(encoder, PcmOut):
            self.pacer = Pacer(
                body.pace_ms,
                encoder.sample_rate,
                encoder.pcm.bytes_per_sample,
                encoder.pcm.silence,
                self._send_frame,
                paced,
            )

    async def _send_frame(self, frame: PacedFrame[None]) -> None:
        self._words = tuple(frame.words)  # those that start in this frame (pace.py)
        await self.write(frame.data)

    async def emit(self, chunk: Chunk) -> None:
        data = await self._encode(chunk.samples, chunk.final)
        if self.pacer is not None:
            if self.first:
                self.first = False
                await self.write(self.encoder.header())  # the header is not paced
            await self.pacer.put(data, None, chunk.words)
            return
        self._words = chunk.words or ()
        self._visemes += chunk.visemes or ()
        if self.first:
            self.first = False
            data = self.encoder.header() + data
            if not data and not self.resp.prepared and self.gone is None:
                with contextlib.suppress(ConnectionError, OSError):
                    await self.resp.prepare(self.request)  # the headers leave with the first
        await self.write(data)

    async def write(self, data: bytes) -> None:
        if (not data and not self._words and not self._visemes) or self.gone is not None:
            return
        if self.ndjson:
            data = self._ndjson_line(data)
        elif self.sse:
            data = self._sse_events(data)
        elif not data:
            return
        try:
            if not self.resp.prepared:
                await self.resp.prepare(self.request)
            await self.outbox.guard(self.resp.write(data), self.stream.buffer_s())
        except ClientTooSlow:
            self.gone = "too_slow"
        except (ConnectionError, OSError):
            self.gone = "disconnect"
        if self.gone is not None:
            # End the stream as a cancel (not an error of the core): run() returns.
            self.stream.cancel("disconnect")

    def lost(self) -> None:
        """Raise what the client's loss was (after the stream's run): the ending is
        ``Lost`` (:func:`~appliance.doors.frame.ending.settle`)."""
        if self.gone == "too_slow":
            raise ClientTooSlow("not reading its audio")
        if self.gone is not None:
            raise ConnectionResetError("the client went away")

    def _ndjson_line(self, data: bytes) -> bytes:
        """Kokoro's line: the audio (base64), its words' timestamps (and visemes)."""
        line: dict[str, Any] = {
            "audio": base64.b64encode(data).decode(),
            "audio_format": self.body.response_format,
            "timestamps": captions.kokoro_timestamps(self._words, self.body.input),
        }
        if self.body.visemes:
            line["visemes"] = captions.visemes_dict(self._visemes)
        self._words, self._visemes = (), ()
        return (json.dumps(line) + "\n").encode()

    def _sse_events(self, data: bytes) -> bytes:
        """OpenAI's ``speech.audio.delta``, then ttsd's word and viseme events."""
        events: list[dict[str, Any]] = []
        if data:
            events.append({"type": "speech.audio.delta", "audio": base64.b64encode(data).decode()})
            self.deltas += 1
        for stamp in captions.kokoro_timestamps(self._words, self.body.input):
            events.append({"type": "ttsd.speech.word", **stamp})
        if self._visemes:
            shapes = captions.visemes_dict(self._visemes)
            events.append({"type": "ttsd.speech.visemes", **shapes})
        self._words, self._visemes = (), ()
        return "".join(f"data: {json.dumps(e)}\n\n" for e in events).encode()

    async def _encode(self, samples: Any, last: bool) -> bytes:
        try:
            if isinstance(self.encoder, SoundfileOut):
                return await self._loop.run_in_executor(
                    self._pool, self.encoder.encode, samples, last
                )
            return self.encoder.encode(samples, last)
        except (RuntimeError, ValueError, TypeError) as exc:
            log.exception("http: %s encoding failed", self.body.response_format)
            raise ServiceError(ErrorCode.INTERNAL, "audio encoding failed") from exc

    async def finish(self) -> None:
        """The encoder's tail, SSE's closing event with its usage, the end of the body."""
        tail = await self._loop.run_in_executor(self._pool, self.encoder.finish)
        if self.pacer is not None:
            await self.write(self.encoder.header() if self.first else b"")
            await self.pacer.put(tail, None)
            await self.pacer.close()
        else:
            await self.write((self.encoder.header() if self.first else b"") + tail)
        if self.sse and self.gone is None:
            text = len(self.body.input)
            usage = {
                "input_tokens": text,
                "output_tokens": self.deltas,
                "total_tokens": text + self.deltas,
            }
            done = {"type": "speech.audio.done", "usage": usage}
            await write_raw(self.resp, self.request, f"data: {json.dumps(done)}\n\n".encode())
        if not self.resp.prepared:
            await self.resp.prepare(self.request)
        await self.resp.write_eof()

    async def close(self) -> None:
        if self.pacer is not None:
            await self.pacer.stop()
        if isinstance(self.encoder, SoundfileOut):
            await release(self._pool, self.encoder.close)


async def release(pool: ThreadPoolExecutor | None, close: Callable[[], None]) -> None:
    """Close an encoder: an encode may still run in a worker (its await was cancelled), so
    close after it, off the loop."""
    try:
        await asyncio.shield(asyncio.get_running_loop().run_in_executor(pool, close))
    except RuntimeError:  # the pool is shut down: the daemon is closing
        close()
    except asyncio.CancelledError:
        pass  # the shielded close still runs


def audio_headers(body: SpeechBody, stream: Stream, rate: int) -> dict[str, str]:
    """What a speech response says of its audio: rate, voice, the speed used."""
    return {
        "X-Sample-Rate": str(rate),
        "X-Voice": stream.voice_name,
        "X-Speed-Applied": f"{body.applied_speed():g}",
    }


async def write_raw(resp: web.StreamResponse, request: web.Request, data: bytes) -> None:
    if not resp.prepared:
        await resp.prepare(request)
    await resp.write(data)
