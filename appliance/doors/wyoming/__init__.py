"""The Wyoming door: Home Assistant (and any Wyoming client) speaks through ttsd.

It stands on the door frame (:mod:`appliance.doors.frame`), which owns a connection's
life cycle: the gate (peer, slot, stopping), the read loop under the idle and frame
timeouts, the output bound and ``client_too_slow``, each request's one ending, a bug's
``internal`` and the close.  What Wyoming adds, module by module:

- :mod:`~appliance.doors.wyoming.events`: the framing (the ``wyoming`` package's),
  bounded before anything is read (``limits.max_message_bytes``: ``frame_too_large``;
  bytes that are not an event: ``bad_request``, the connection closed); ``info``.
- :mod:`~appliance.doors.wyoming.messages`: ``synthesize`` / ``synthesize-start`` →
  :class:`~appliance.speech.SpeechRequest`, each field checked.
- :mod:`~appliance.doors.wyoming.protocol`: each event's work on one connection:
  requests in order, one at a time, text streams, errors as ``error`` events.
- :mod:`~appliance.doors.wyoming.door`: where it listens (``wyoming.uri``) and who may
  connect (a Unix socket's peers as protocol v1's; TCP peers in
  ``wyoming.allowed_networks``).
- :mod:`~appliance.doors.wyoming.zeroconf`: the mDNS record Home Assistant discovers.
"""

from appliance.doors.wyoming.door import WyomingDoor
from appliance.doors.wyoming.events import BadEvent, FrameTooLarge, info_event, read_event
from appliance.doors.wyoming.messages import SynthesizeMessage, VoiceChoice
from appliance.doors.wyoming.zeroconf import SERVICE_TYPE, advertised_address, zeroconf_record

__all__ = [
    "SERVICE_TYPE",
    "BadEvent",
    "FrameTooLarge",
    "SynthesizeMessage",
    "VoiceChoice",
    "WyomingDoor",
    "advertised_address",
    "info_event",
    "read_event",
    "zeroconf_record",
]
