"""The HTTP door: OpenAI's ``POST /v1/audio/speech``, voices, models, health, metrics.

A door on the service core, served by aiohttp (an asyncio HTTP server that streams
responses; no HTTP parsing here).  It stands on the door frame's parts where they map
onto aiohttp (:mod:`appliance.doors.frame`): :class:`~appliance.doors.frame.door.DoorBase`
for its settings and its stop, :func:`~appliance.doors.frame.ending.settle` for how each
request ends, :class:`~appliance.doors.frame.ending.Report` for its throttled log of
failures, and :class:`~appliance.doors.net.Outbox` for the one too-slow rule.  aiohttp
owns the connection and its read loop, so what the frame's listener and session do is,
here, module by module:

- :mod:`~appliance.doors.http.door`: :class:`HttpDoor`, the application, its listener,
  start, drain and close.
- :mod:`~appliance.doors.http.guard`: each connection before aiohttp has a request:
  counted from accept, its head timed and capped, refused in the doors' one way.
- :mod:`~appliance.doors.http.gate`: each request before its handler: the API key,
  aiohttp's refusals as JSON, a bug's 500, the body's size and time bounds.
- :mod:`~appliance.doors.http.request`: the JSON body → :class:`SpeechBody` →
  :class:`~appliance.speech.SpeechRequest`, each field checked in one place.
- :mod:`~appliance.doors.http.speech`: the speech endpoints: open the stream, reply
  streamed or whole, and each ending as its response.
- :mod:`~appliance.doors.http.sink`: one streamed reply (audio bytes, SSE events or
  Kokoro's NDJSON lines), encoded off the loop, paced when asked.
- :mod:`~appliance.doors.http.ops`: ``/healthz``, ``/readyz``, ``/metrics``,
  ``/v1/audio/voices``, ``/v1/models``.
- :mod:`~appliance.doors.http.errors`: OpenAI's error shape, the one place that writes it.

Endpoints:

- ``POST /v1/audio/speech`` — ``{model, input, voice, response_format, speed,
  stream_format}`` as OpenAI takes them; audio streams out chunk by chunk (chunked
  transfer) or as Server-Sent Events (``speech.audio.delta`` / ``speech.audio.done``);
  with ``"stream": false``, a whole file (:mod:`appliance.doors.whole`).
- ``POST /dev/captioned_speech`` — Kokoro-FastAPI's: audio with word timestamps.
- ``GET /v1/audio/voices``, ``GET /v1/models`` — for clients that list them.
- ``GET /healthz`` — 200 while serving, 503 while draining or when nothing can serve.
- ``GET /readyz`` — 200 while the box would take a new stream now, 503 while it is full
  (admission would say ``busy``), starting or draining: a balancer's HTTP check
  (:mod:`appliance.core.capacity`, docs/scale-out.md).  Like ``/healthz``, no key.
- ``GET /metrics`` — the daemon's Prometheus registry (:mod:`appliance.ops.metrics`).
- ``GET /v1/text-to-speech/{voice}/stream-input`` and ``.../multi-stream-input`` —
  ElevenLabs' input-streaming WebSocket (:mod:`appliance.doors.elevenlabs`; its key may
  come as ``xi-api-key``).

Limits as protocol v1's: a key is required off loopback (constant-time compare), the
body is capped (413), the body must arrive within ``limits.frame_timeout_s``, and a client
that stops reading is ended after ``limits.client_too_slow_s`` beyond the audio it holds.
Every refusal is OpenAI's JSON error; a bug on a request's path is a JSON 500
``internal``.  A client that disconnects cancels its stream at once (aiohttp cancels the
handler; the stream is cancelled, not abandoned).
"""

from appliance.doors.http.door import HttpDoor
from appliance.doors.http.errors import error_response
from appliance.doors.http.ops import MODEL_ID
from appliance.doors.http.request import (
    OPENAI_SPEED,
    OPENAI_VOICES,
    RESPONSE_FORMATS,
    STREAM_FORMATS,
    TTSD_SPEED,
    BadField,
    SpeechBody,
)
from appliance.doors.http.speech import DOOR

__all__ = [
    "DOOR",
    "MODEL_ID",
    "OPENAI_SPEED",
    "OPENAI_VOICES",
    "RESPONSE_FORMATS",
    "STREAM_FORMATS",
    "TTSD_SPEED",
    "BadField",
    "HttpDoor",
    "SpeechBody",
    "error_response",
]
