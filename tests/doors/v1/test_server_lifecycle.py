"""Start-up, cancellation, shutdown and the socket's security, on the real daemon."""

from __future__ import annotations

import os
import pwd
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import Daemon, DaemonFactory, let_anyone_walk_to
from tests.wire import Wire

LONG = "This sentence is spoken again and again so that the stream lasts a while. " * 20


def test_socket_mode_and_info(daemon: Daemon) -> None:
    st = os.stat(daemon.socket)
    assert stat.S_ISSOCK(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o660
    with Wire(daemon.socket) as w:
        info = w.call({"op": "info", "id": 1})
        assert info["protocol"] == 1
        assert info["default_voice"] == "en_US-joe-medium"
        assert info["voices"][0]["sample_rate"] == 22050
        assert info["voices"][0]["streaming"] is True
        assert set(info["formats"]) == {"s16le", "f32le", "mulaw", "alaw"}
        health = w.call({"op": "health", "id": 2})
        assert health["status"] == "ok" and health["backend"] == "onnx-cpu"
        assert w.call({"op": "warmup", "id": 3})["event"] == "ok"


def test_cancel_stops_stream_within_a_window(daemon: Daemon) -> None:
    with Wire(daemon.socket) as w:
        # About five minutes of audio: the stream is far from done when the cancel lands.
        w.send({"op": "synthesize", "id": 1, "text": LONG * 3})
        first = w.until(1, ("chunk",))
        assert first[-1]["event"] == "chunk"
        w.send({"op": "cancel", "id": 2, "target": 1})
        evs = w.until(1)
        end = evs[-1]
        assert end["event"] == "end" and end["cancelled"] is True
        # Chunks already sent (decode-ahead) arrive, then it stops: far short of the whole.
        assert end["stats"]["audio_ms"] < 100_000
        got = w.until(2, ("cancelled",))
        assert got[-1]["target"] == 1
        st = w.call({"op": "stats", "id": 3})
        assert st["queue_depth"] == 0


def test_many_requests_on_one_connection_interleave(daemon: Daemon) -> None:
    with Wire(daemon.socket) as w:
        for i in range(1, 5):
            # Not real-time: on a busy box admission may rightly refuse a fourth real-time
            # stream (`busy`, before any `start`); what is tested here is the interleaving.
            req = {"op": "synthesize", "id": i, "text": f"Request number {i} is here."}
            w.send({**req, "realtime": False})
        ends = {}
        starts = set()
        while len(ends) < 4:
            ev = w.recv()
            assert ev is not None
            if ev["event"] == "start":
                starts.add(ev["id"])
            if ev["event"] in ("end", "error"):
                assert ev["id"] not in ends  # exactly one end per request
                ends[ev["id"]] = ev["event"]
        assert starts == {1, 2, 3, 4}
        assert set(ends.values()) == {"end"}


def test_sigterm_finishes_inflight_then_removes_socket(daemon_factory: DaemonFactory) -> None:
    d = daemon_factory({"limits": {"shutdown_timeout_s": 20}})
    with Wire(d.socket) as w:
        w.send({"op": "synthesize", "id": 1, "text": "A short goodbye before the daemon stops."})
        assert w.recv()["event"] == "start"
        d.proc.send_signal(signal.SIGTERM)
        evs = w.until(1)
        assert evs[-1]["event"] == "end" and evs[-1]["cancelled"] is False
    assert d.proc.wait(timeout=30) == 0
    assert not os.path.exists(d.socket)


def test_sigterm_ends_stragglers_with_an_error(daemon_factory: DaemonFactory) -> None:
    d = daemon_factory({"limits": {"shutdown_timeout_s": 0.5, "client_too_slow_s": 60}})
    with Wire(d.socket) as w:
        w.send({"op": "synthesize", "id": 1, "text": LONG * 3, "realtime": True})
        assert w.recv()["event"] == "start"
        d.proc.send_signal(signal.SIGINT)
        evs = w.until(1)
        assert evs[-1]["event"] == "error" and evs[-1]["code"] == "shutting_down"
    assert d.proc.wait(timeout=30) == 0
    assert not os.path.exists(d.socket)


def test_stale_socket_is_replaced(daemon_factory: DaemonFactory, tmp_path: Path) -> None:
    d = daemon_factory()
    d.proc.kill()  # a crash leaves the socket file behind
    d.proc.wait()
    assert os.path.exists(d.socket)
    cmd = [sys.executable, "-m", "appliance.main", "serve", "--socket", d.socket]
    cmd += ["--config", str(d.config_path)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with Wire(d.socket) as w:
                    assert w.call({"op": "ping", "id": 1})["event"] == "pong"
                break
            except (ConnectionRefusedError, FileNotFoundError):
                assert proc.poll() is None and time.monotonic() < deadline
                time.sleep(0.1)
        # A second daemon on the same live socket refuses instead of stealing it.
        second = subprocess.run(cmd, capture_output=True, timeout=120)
        assert second.returncode != 0
        assert b"another daemon" in second.stderr
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_front_end_that_cannot_listen_stops_start_up_cleanly(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    """A port in use for --http or --wyoming: exit 1 with the reason, and the protocol v1
    socket bound just before is not left behind."""
    d = daemon_factory()
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        for flag in (["--http", f"127.0.0.1:{port}"], ["--wyoming", f"tcp://127.0.0.1:{port}"]):
            sock = tmp_path / "t.sock"
            cmd = [sys.executable, "-m", "appliance.main", "serve", "--socket", str(sock)]
            cmd += ["--config", str(d.config_path), *flag]
            r = subprocess.run(cmd, capture_output=True, timeout=300)
            assert r.returncode == 1
            assert b"cannot listen" in r.stderr and b"address already in use" in r.stderr
            assert not sock.exists()
    finally:
        taken.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another uid")
def test_peer_credentials_checked(daemon_factory: DaemonFactory) -> None:
    # Mode 0666 lets anyone reach the socket, so only SO_PEERCRED stands in the way.
    d = daemon_factory({"v1": {"socket_mode": 0o666}})
    nobody = pwd.getpwnam("nobody")
    let_anyone_walk_to(d.socket)
    code = (
        "import os, socket, msgpack, sys\n"
        f"os.setgid({nobody.pw_gid}); os.setgroups([]); os.setuid({nobody.pw_uid})\n"
        "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
        "s.sendall(msgpack.packb({'op': 'ping', 'id': 1}))\n"
        "u = msgpack.Unpacker(raw=False); u.feed(s.recv(65536)); print(next(u)['code'])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, d.socket], capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == "unauthorized", out.stderr
    with Wire(d.socket) as w:  # our own uid is allowed
        assert w.call({"op": "ping", "id": 1})["event"] == "pong"


def test_raw_socket_garbage_then_service_continues(daemon: Daemon) -> None:
    for payload in (b"\x00" * 10, b"GET / HTTP/1.1\r\n\r\n", os.urandom(512)):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(daemon.socket)
        s.sendall(payload)
        s.close()
    with Wire(daemon.socket) as w:
        assert w.call({"op": "ping", "id": 1})["event"] == "pong"
        w.send({"op": "synthesize", "id": 2, "text": "Fine."})
        assert w.until(2)[-1]["event"] == "end"


def test_an_unknown_default_voice_stops_start_up_in_one_line(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    with pytest.raises(RuntimeError, match="daemon exited with 1") as exc:
        daemon_factory({"voices": {"default": "en_XX-nobody"}})
    log = str(exc.value)
    assert "cannot start: voices.default: voice 'en_XX-nobody' not found" in log
    assert "Traceback" not in log  # a ValueError traceback before


def test_a_corrupt_voice_in_voices_dir_is_skipped_and_the_rest_served(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    from appliance.model.voices import bundled_voice_path

    voices = tmp_path / "voices"
    voices.mkdir()
    (voices / "broken.onnx").write_bytes(os.urandom(4096))
    bundled = bundled_voice_path()
    (voices / "broken.onnx.json").write_bytes(Path(f"{bundled}.json").read_bytes())
    d = daemon_factory({"voices": {"voices_dir": str(voices)}})
    with Wire(d.socket) as w:
        info = w.call({"op": "info", "id": 1})
        assert [v["name"] for v in info["voices"]] == ["en_US-joe-medium"]
        w.send({"op": "synthesize", "id": 2, "text": "Still here."})
        assert w.until(2)[-1]["event"] == "end"
    log = d.log()
    skipped = f"voice broken ({voices / 'broken.onnx'}) skipped: not an ONNX model (Error parsing"
    assert skipped in log
    assert "Traceback" not in log  # a DecodeError traceback, and no daemon, before
