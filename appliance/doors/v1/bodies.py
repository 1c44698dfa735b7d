"""What each protocol v1 request does: its body, from its message to its end event.

A body runs as a request of the frame (:meth:`~appliance.doors.frame.requests.Requests.start`)
and returns the bytes of its end event (``pong``, ``info``, …, ``phonemes``, ``end``);
what it raises is its one error (:func:`~appliance.doors.frame.ending.settle`: a
ServiceError is said, a client gone or too slow is the session's, a bug is
``internal``).  Events before the end go out through the session: ``start`` and
``chunk`` with back-pressure (a chunk's ``grace_s`` is the audio the client holds),
``queued`` waiting too, ``started``/``mark``/``word`` of a ``speak`` at once (small).

- ``synthesize``: ``start``, the chunks (or, with ``pace_ms``, frames of exactly that
  many ms on the real-time clock through a :class:`~appliance.doors.pace.Pacer`), ``end``.
- ``speak``: plays on the device; ``queued``, ``started``, marks and words, ``end``.
  Speech outlives its client: a ``queued`` the client does not read is no reason to
  stop it.
- ``info``, ``stats``, ``health``, ``ping`` (``warm``), ``warmup``, ``stop`` (the
  client's own speech), ``phonemes``: one answer each.

Text held before a text stream opens (the frame's request) goes into the stream once it
is open; a cancel that came meanwhile applies then.
"""

from __future__ import annotations

import contextlib
from typing import Any

from appliance.core.service import Service, Stream, StreamResult
from appliance.doors.frame.requests import Request
from appliance.doors.frame.session import Session
from appliance.doors.net import ClientTooSlow
from appliance.doors.pace import PacedFrame, PacedSends, Pacer
from appliance.doors.pcm import PcmEncoder
from appliance.doors.v1.protocol import (
    ChunkEvent,
    EndEvent,
    PhonemesRequest,
    SimpleEvent,
    SimpleRequest,
    StartEvent,
    SynthesizeRequest,
    pack,
)
from appliance.errors import ServiceError
from appliance.speech import Chunk, Viseme

DOOR = "protocol-v1"


class Bodies:
    """The request bodies of one connection (see the module doc)."""

    def __init__(self, session: Session, service: Service, paced: PacedSends) -> None:
        self.session = session
        self.service = service
        self.paced = paced

    # ------------------------------------------------------------ one answer

    async def simple(self, req: SimpleRequest) -> bytes:
        """``ping``, ``info``, ``stats``, ``health``, ``warmup``, ``stop``."""
        svc = self.service
        body: dict[str, Any] = {}
        try:
            if req.op == "ping":
                # ``warm``: a request now is as quick as any later one (issue 42).
                event, body = "pong", {"warm": svc.warm}
            elif req.op in ("info", "stats", "health"):
                answer = {"info": svc.info, "stats": svc.stats, "health": svc.health}[req.op]
                event, body = req.op, answer()
            elif req.op == "warmup":
                await svc.warmup()
                event = "ok"
            else:  # stop: what this client's user asked to be spoken
                svc.stop_speech(self.session.client)
                event = "ok"
        except ServiceError as exc:
            self.session.report.count(exc.code)  # raised here, not by a stream: ours to count
            raise
        return pack(SimpleEvent(req.id, event, body).to_dict())

    async def phonemes(self, req: PhonemesRequest) -> bytes:
        """What a voice says for a text (its ServiceError is counted by the core)."""
        fmt = req.text_format or self.service.runtime.config.v1.text_format
        result = await self.service.phonemes(req.text, req.voice, fmt)
        return pack(SimpleEvent(req.id, "phonemes", result).to_dict())

    # ------------------------------------------------------------ streams

    async def synthesize(self, req: SynthesizeRequest, r: Request) -> bytes:
        """``synthesize`` or ``speak``: the stream opened (its refusal is counted by the
        core), run, and closed; the ``end``."""
        speak = req.op == "speak"
        v1 = self.service.runtime.config.v1
        stream = await self.service.open_stream(
            req.speech(v1.text_format, v1.text_start),
            door=DOOR,
            label={"connection": self.session.number, "id": req.id},
            speak_key=self.session.client if speak else None,
        )
        try:
            refused = r.opened(stream)  # a cancel meanwhile applies; held text goes in
            if refused is not None:
                stream.fail(refused)  # its one error comes from run(), after start
            result = await (self._speak(req, stream) if speak else self._audio(req, stream))
        finally:
            stream.close()  # no-op once it ran; releases it if sending 'start' failed
        return pack(
            EndEvent(
                req.id,
                result.cancelled,
                result.stats,
                result.interrupted,
                result.heard,
                result.sent_text_span,
            ).to_dict()
        )

    async def _audio(self, req: SynthesizeRequest, stream: Stream) -> StreamResult:
        """``start``, then the chunks (or paced frames) as they are made."""
        rate = req.out_rate(stream.sample_rate)
        start = StartEvent(req.id, rate, req.format, stream.voice_name)
        await self.session.send(pack(start.to_dict()))
        encoder = PcmEncoder(stream.sample_rate, rate, req.format)
        if req.pace_ms is not None:
            return await self._paced(req, stream, encoder, req.pace_ms)

        async def emit(chunk: Chunk) -> None:
            event = ChunkEvent.from_chunk(req.id, chunk, encoder(chunk.samples, chunk.final))
            await self.session.send(pack(event.to_dict()), grace_s=stream.buffer_s())

        return await stream.run(emit)

    async def _paced(
        self, req: SynthesizeRequest, stream: Stream, encoder: PcmEncoder, pace_ms: int
    ) -> StreamResult:
        """``pace_ms``: chunks go into a :class:`Pacer`, frames leave on the clock, and
        ``end`` follows the last frame (:mod:`appliance.doors.pace`)."""

        async def send(frame: PacedFrame[Chunk]) -> None:
            event = ChunkEvent.from_frame(req.id, frame, req.word_timings)
            await self.session.send(pack(event.to_dict()), grace_s=stream.buffer_s())

        pacer: Pacer[Chunk] = Pacer(
            pace_ms, encoder.out_rate, encoder.bytes_per_sample, encoder.silence, send, self.paced
        )

        async def emit(chunk: Chunk) -> None:
            await pacer.put(encoder(chunk.samples, chunk.final), chunk, chunk.words)

        try:
            result = await stream.run(emit)
            if not result.cancelled:
                await pacer.close()
            result.stats.update(paced_frames=pacer.frames, paced_late=pacer.late)
            return result
        finally:
            await pacer.stop()

    async def _speak(self, req: SynthesizeRequest, stream: Stream) -> StreamResult:
        write = self.session.write

        async def queued(position: int) -> None:
            # Speech outlives its client: a client gone, or not reading, is no reason to
            # stop it (the connection's client_gone decides what happens to it).
            with contextlib.suppress(ClientTooSlow, ConnectionError, OSError):
                event = SimpleEvent(req.id, "queued", {"position": position})
                await self.session.send(pack(event.to_dict()))

        def started(latency_ms: float) -> None:
            body = {"latency_ms": round(latency_ms, 2)}
            write(pack(SimpleEvent(req.id, "started", body).to_dict()))

        def mark(name: str) -> None:
            write(pack(SimpleEvent(req.id, "mark", {"name": name}).to_dict()))

        def word(span: tuple[int, int]) -> None:
            write(pack(SimpleEvent(req.id, "word", {"text_span": list(span)}).to_dict()))

        def viseme(v: Viseme) -> None:
            body = {"viseme": v.viseme, "duration_ms": round(v.duration_ms, 2)}
            write(pack(SimpleEvent(req.id, "viseme", body).to_dict()))

        return await stream.run_speech(
            queued,
            started,
            mark,
            word if req.word_timings else None,
            viseme if req.visemes else None,
        )
