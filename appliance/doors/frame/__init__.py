"""The door frame: one connection's life cycle, written once for every door.

A door adds its framing (bytes or messages in, events out) and its mapping of messages
onto the service core (message → :class:`~appliance.speech.SpeechRequest` → stream →
events); the frame does the rest, the same on every door::

    listener ── Gate: peer allowed? a slot? stopping? ── refuse (the door's error, then close)
       │
    Session.serve(protocol)                              (one connection)
       read loop: protocol.read() under ReadTimer ── idle / frame timeout, Fatal → refuse
         └─ protocol.dispatch(message)                   (a bug: that message's internal)
              └─ Requests.start / run(request, body)    (each request)
                   settle(body) → Done | Failed | Lost   (its one terminal event)
       output: Session.send (Outbox: the bound, the one too-slow rule)
       end: EOF → half-close (answers still go out) or gone → requests cancelled, close

- :mod:`~appliance.doors.frame.door`: :class:`Door`, what the daemon runs (start, the
  stop in three steps, close), and :class:`DoorBase`, where every door reads its
  settings (the daemon's one config, read on every use: a SIGHUP reaches connections
  already open).
- :mod:`~appliance.doors.frame.ending`: :func:`settle`, the one place that decides how a
  request ends, and :class:`Report`, the doors' throttled log of failures.
- :mod:`~appliance.doors.frame.requests`: a connection's requests, each with its stream,
  the text held before the stream opens, and its cancel.
- :mod:`~appliance.doors.frame.session`: :class:`Session` (one connection, whatever
  carries it: a :class:`Channel`) and :class:`WireProtocol` (what a door adds).
- :mod:`~appliance.doors.frame.listener`: :class:`StreamDoor`, a listener on a Unix or TCP
  socket with the gate in front of its sessions.

Protocol v1 (:mod:`appliance.doors.v1`: its framing and messages in
:mod:`~appliance.doors.v1.connection`, its door in :mod:`~appliance.doors.v1.server`),
Wyoming (:mod:`appliance.doors.wyoming`), the agent (:mod:`appliance.doors.agent`) and
the agents' WebSocket (:mod:`appliance.doors.elevenlabs`: a :class:`Session` over a
channel that writes whole WebSocket frames, its contexts the session's requests) stand
on it.  The HTTP door (:mod:`appliance.doors.http`) takes :class:`DoorBase`,
:func:`settle` and :class:`Report` from it, with aiohttp's connections and its own gate
(:mod:`appliance.doors.http.guard`).
"""
