"""Random msgpack values and byte strings thrown at a live daemon: it still answers ping."""

from __future__ import annotations

import socket

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import Daemon
from tests.wire import Wire

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.binary(max_size=40),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.dictionaries(
            st.one_of(st.text(max_size=10), st.integers(-(2**63), 2**63 - 1)), children, max_size=5
        ),
    ),
    max_leaves=20,
)
ops = st.sampled_from(
    ["synthesize", "speak", "cancel", "info", "stats", "health", "ping", "warmup", "stop", "x"]
)
requests = st.fixed_dictionaries(
    {"op": ops, "id": st.one_of(st.integers(-5, 5), values)},
    optional={
        "text": st.one_of(st.text(max_size=30), values),
        "voice": st.one_of(st.text(max_size=20), values),
        "speed": st.one_of(st.floats(), values),
        "volume": st.one_of(st.floats(), values),
        "format": st.one_of(st.sampled_from(["s16le", "f32le", "wav"]), values),
        "target": values,
        "mode": values,
        "sample_rate": values,
    },
)


def _drain_then_ping(path: str, payload: bytes) -> None:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(20)
    s.connect(path)
    try:
        s.sendall(payload)
    except (BrokenPipeError, ConnectionResetError):
        pass
    s.close()


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(msgs=st.lists(st.one_of(values, requests), min_size=1, max_size=4))
def test_random_messages(daemon: Daemon, msgs: list) -> None:
    with Wire(daemon.socket, timeout=60) as w:
        for m in msgs:
            w.send(m)
        w.send({"op": "ping", "id": 424242})
        # Every reply is a well-formed event; the ping is answered after them.
        while True:
            ev = w.recv()
            assert ev is not None, "daemon closed a connection that sent valid msgpack"
            assert "event" in ev
            if ev.get("id") == 424242 and ev["event"] == "pong":
                break


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(payload=st.binary(min_size=1, max_size=300))
def test_random_bytes(daemon: Daemon, payload: bytes) -> None:
    _drain_then_ping(daemon.socket, payload)
    with Wire(daemon.socket) as w:
        assert w.call({"op": "ping", "id": 1})["event"] == "pong"
    assert daemon.alive()
