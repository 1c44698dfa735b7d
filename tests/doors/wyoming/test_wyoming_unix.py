"""The Wyoming door on a Unix socket: served like TCP, peers checked as protocol v1's are."""

from __future__ import annotations

import os
import pwd
import stat
import subprocess
import sys

import pytest
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop

from tests.conftest import Daemon, DaemonFactory, let_anyone_walk_to
from tests.doors.wyoming.wyoming_helpers import SHORT_TEXT, client_for, request, wyoming_uri


async def test_describe_and_synthesize_over_unix(wy_unix_uri: str) -> None:
    async with client_for(wy_unix_uri) as c:
        await c.write_event(Describe().event())
        ev = await c.read_event()
    assert ev is not None and Info.is_type(ev.type)
    r = await request(wy_unix_uri, Synthesize(text=SHORT_TEXT).event())
    assert r.error is None and r.types[0] == "audio-start" and r.types[-1] == "audio-stop"
    r = await request(
        wy_unix_uri,
        SynthesizeStart().event(),
        SynthesizeChunk(text="Streamed over a Unix socket. ").event(),
        SynthesizeStop().event(),
        streaming=True,
    )
    assert r.error is None and r.types[-1] == "synthesize-stopped"


def test_unix_socket_mode_is_the_servers(wy_unix_uri: str) -> None:
    st = os.stat(wy_unix_uri[len("unix://") :])
    assert stat.S_ISSOCK(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o660


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another uid")
def test_unix_peer_credentials_checked(
    daemon_factory: DaemonFactory, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path_factory.mktemp("wyoming-peer") / "w.sock"
    # Mode 0666 lets anyone reach the socket, so only SO_PEERCRED stands in the way.
    d: Daemon = daemon_factory({"wyoming": {"uri": f"unix://{path}", "socket_mode": 0o666}})
    uri = wyoming_uri(d)
    nobody = pwd.getpwnam("nobody")
    let_anyone_walk_to(path)
    # (Raw JSON lines: this interpreter's importlib.metadata is not readable by nobody.)
    code = (
        "import json, os, socket, sys\n"
        f"os.setgid({nobody.pw_gid}); os.setgroups([]); os.setuid({nobody.pw_uid})\n"
        "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
        's.sendall(b\'{"type": "describe"}\\n\')\n'
        "f = s.makefile('rb'); h = json.loads(f.readline())\n"
        "print(h['type'], json.loads(f.read(h['data_length']))['code'])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == "error unauthorized", (out.stdout, out.stderr)
    # Our own uid is allowed.
    import asyncio

    async def ours() -> str:
        async with client_for(uri) as c:
            await c.write_event(Describe().event())
            ev = await c.read_event()
        assert ev is not None
        return ev.type

    assert asyncio.run(ours()) == "info"
    # The socket file we made is removed at shutdown.
    assert d.stop() == 0
    assert not path.exists()
