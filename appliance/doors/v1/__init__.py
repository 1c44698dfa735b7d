"""Protocol v1: msgpack over a Unix socket (the native door), on the door frame.

- :mod:`~appliance.doors.v1.protocol`: one dataclass per message, its validation, the
  msgpack codec and the bounded :class:`~appliance.doors.v1.protocol.FrameReader`.
- :mod:`~appliance.doors.v1.connection`: what v1 adds to the frame for one connection
  (:class:`~appliance.doors.v1.connection.V1Protocol`: framing, messages → requests,
  ``cancel``/``append``/``finish``, speech that outlives its client); testable without
  a socket.
- :mod:`~appliance.doors.v1.bodies`: what each request does, up to its end event.
- :mod:`~appliance.doors.v1.server`: :class:`~appliance.doors.v1.server.V1Door`, where
  it listens and who may connect.

The frame (:mod:`appliance.doors.frame`) owns the rest: the gate, the read loop and its
timeouts, the output bound and ``client_too_slow``, each request's one ending, refusal
and close.
"""
