"""A private PulseAudio server with a null sink, and a recorder of its monitor.

Used by the playback tests and ``bench_playback``: the player reaches the sink the way it
reaches a real sound card through PulseAudio (PortAudio -> ALSA ``default`` -> ALSA's pulse
plugin), and ``parec`` records what the sink rendered.  The null sink is driven by a timer
at its sample rate, so it consumes audio like a sound card would.

Nothing here touches the user's own PulseAudio: the server has its own runtime directory,
socket, cookie home and client.conf (``autospawn = no``, so a client whose server died
does not start a system one).  The process environment the *client* needs is in
:attr:`PulseServer.env`; PortAudio reads it when it initialises, so set it before
``Player.open`` (which re-initialises PortAudio when sounddevice was already imported).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import IO

import numpy as np
import numpy.typing as npt

SINK = "ttsd_test"
PACKAGES = "pulseaudio pulseaudio-utils libportaudio2 libasound2-plugins"


class PulseUnavailable(RuntimeError):
    """pulseaudio/parec are not installed or the server did not come up."""


class PulseServer:
    def __init__(self, workdir: Path, rate: int = 48000) -> None:
        self.workdir = workdir
        self.rate = rate
        self.runtime_dir = workdir / "runtime"
        self.socket = self.runtime_dir / "native"
        self.log_path = workdir / "pulseaudio.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.env = {
            "PULSE_SERVER": f"unix:{self.socket}",
            "PULSE_CLIENTCONFIG": str(workdir / "client.conf"),
            "ALSA_CONFIG_PATH": str(workdir / "asound.conf"),
        }

    @classmethod
    def start(cls, workdir: Path, rate: int = 48000) -> PulseServer:
        for tool in ("pulseaudio", "parec"):
            if shutil.which(tool) is None:
                raise PulseUnavailable(f"{tool} not found; install: apt-get install {PACKAGES}")
        server = cls(workdir, rate)
        server.runtime_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        (workdir / "client.conf").write_text("autospawn = no\n")
        # The system alsa.conf first (plugin types, hooks), then ``default`` forced to
        # pulse: the stock 99-pulse.conf only does so while a server is reachable, which
        # would change the device under us when the test kills the server.
        (workdir / "asound.conf").write_text(
            "</usr/share/alsa/alsa.conf>\n"
            "pcm.!default { type pulse }\n"
            "ctl.!default { type pulse }\n"
        )
        server.launch()
        return server

    def launch(self, timeout: float = 10.0) -> None:
        """Start (or restart) the server process and wait until it accepts clients."""
        if self.running():
            return
        self.socket.unlink(missing_ok=True)
        env = dict(os.environ)
        env.update(
            XDG_RUNTIME_DIR=str(self.runtime_dir),
            HOME=str(self.workdir),  # its cookie goes here, not in the real home
            PULSE_RUNTIME_PATH=str(self.runtime_dir),
        )
        env.pop("PULSE_SERVER", None)
        args = [
            "pulseaudio",
            "-n",  # no default.pa: only the modules below
            "--daemonize=no",
            "--exit-idle-time=-1",
            "--system=false",  # as root it warns but runs per-user, which is what we want
            "--disallow-exit",
            "--use-pid-file=false",
            "--realtime=false",
            "--high-priority=false",
            "--log-target=stderr",
            f"--load=module-native-protocol-unix auth-anonymous=1 socket={self.socket}",
            f"--load=module-null-sink sink_name={SINK} rate={self.rate} channels=1 "
            "format=float32le",
        ]
        log: IO[bytes] = self.log_path.open("ab")
        self.proc = subprocess.Popen(args, env=env, stdout=log, stderr=log, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise PulseUnavailable(
                    f"pulseaudio exited with {self.proc.returncode}: {self.log_tail()}"
                )
            if _connectable(self.socket):
                return
            time.sleep(0.02)
        raise PulseUnavailable(f"pulseaudio did not come up: {self.log_tail()}")

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: the device vanishes without goodbye, as when a card is pulled."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.kill()

    def log_tail(self, n: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def record(self) -> Recording:
        return Recording.start(self)


def _connectable(path: Path) -> bool:
    if not path.exists():
        return False
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        s.close()


class Recording:
    """``parec`` of the sink's monitor, read continuously by a thread.

    Timing: every read is stamped with ``time.monotonic()``.  The null sink and the
    monotonic clock tick together, so sample ``i`` was rendered at ``epoch + i / rate``;
    each read ``k`` that ends at sample ``n_k`` at time ``t_k`` bounds the epoch from above
    by ``t_k - n_k / rate`` (data cannot arrive before it was rendered), and the smallest
    bound over all reads is the estimate.  Its error is the smallest delivery delay seen
    (a few ms with ``--latency-msec=5``), always late, never early.
    """

    def __init__(self, proc: subprocess.Popen[bytes], rate: int) -> None:
        self.proc = proc
        self.rate = rate
        self._buf = bytearray()
        self._stamps: list[tuple[float, int]] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._read, name="parec-reader", daemon=True)

    @classmethod
    def start(cls, server: PulseServer, timeout: float = 10.0) -> Recording:
        env = dict(os.environ)
        env.update(server.env)
        proc = subprocess.Popen(
            [
                "parec",
                f"--device={SINK}.monitor",
                "--format=float32le",
                f"--rate={server.rate}",
                "--channels=1",
                "--raw",
                "--latency-msec=5",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        rec = cls(proc, server.rate)
        rec._thread.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and rec.frames() < server.rate // 10:
            time.sleep(0.01)
        if rec.frames() == 0:
            rec.stop()
            raise PulseUnavailable("parec delivered nothing")
        return rec

    def _read(self) -> None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while True:
            try:
                data = os.read(fd, 8192)
            except OSError:
                return
            if not data:
                return
            now = time.monotonic()
            with self._lock:
                self._buf += data
                self._stamps.append((now, len(self._buf) // 4))

    def frames(self) -> int:
        with self._lock:
            return len(self._buf) // 4

    def samples(self) -> npt.NDArray[np.float32]:
        with self._lock:
            n = len(self._buf) // 4 * 4
            return np.frombuffer(bytes(self._buf[:n]), dtype=np.float32).copy()

    def epoch(self) -> float:
        """Estimated monotonic time at which sample 0 was rendered."""
        with self._lock:
            stamps = list(self._stamps)
        if not stamps:
            raise ValueError("nothing recorded yet")
        return min(t - n / self.rate for t, n in stamps)

    def wait_covered(self, t: float, timeout: float = 10.0) -> bool:
        """Wait until the recording holds what was rendered up to monotonic time ``t``.

        A busy machine delivers the monitor late (parec or the reader thread not
        scheduled): a fixed sleep would cut the recording short of the sound it measures.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.frames() and self.time_of(self.frames()) >= t:
                return True
            time.sleep(0.01)
        return False

    def time_of(self, index: int | float) -> float:
        return self.epoch() + float(index) / self.rate

    def index_at(self, t: float) -> int:
        return round((t - self.epoch()) * self.rate)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._thread.join(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> Recording:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def first_loud(x: npt.NDArray[np.float32], threshold: float) -> int:
    """Index of the first sample with ``|x| > threshold``; -1 if none."""
    idx = np.flatnonzero(np.abs(x) > threshold)
    return int(idx[0]) if idx.size else -1


def last_loud(x: npt.NDArray[np.float32], threshold: float) -> int:
    idx = np.flatnonzero(np.abs(x) > threshold)
    return int(idx[-1]) if idx.size else -1
