"""The 2-D decoder with its element-wise operators in ONNX Runtime's blocked layout
(:mod:`appliance.model.nchwc`), made for the machine that runs it and kept in the voice's
cache.

Lifecycle: made at a voice's load (or by ``ttsd prepare``) when no graph is kept for this
machine, by a child process (:mod:`appliance.model.engine.make_blocked`), checked there
against ONNX Runtime's own on a probe window, then kept beside the source graph; later
loads use the kept file.  Bounds: one kept file per source graph (those for other machines
or ONNX Runtimes are removed when a new one is kept); the child runs at most
:data:`MAKE_TIMEOUT_S` and works in a private temporary directory that goes with it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort

from appliance.model.engine import sessions
from appliance.model.margins import read_crops
from appliance.model.nchwc import fold_sums, keep_blocked
from appliance.ops import atomic
from appliance.ops.logsetup import one_line
from appliance.voicetypes import CutNames

log = logging.getLogger(__name__)

MAKE_TIMEOUT_S = 120.0
"""The most the child that makes the graph may take (~1 s here, with its imports)."""

NOT_BLOCKED = 3
"""The child's exit status when it made no graph, and said why (its last line)."""

REWRITE = 2
"""The rewrite's version, part of a kept file's name: one an older rewrite made (1: the
blocked layout alone) is made again."""

SAME_WITHIN = 1e-6
"""The most a sample of the made graph may differ from ONNX Runtime's own on the probe
window.  Folded sums differ by ~7e-8 (another order of three additions); a rewrite that
read a tensor in the wrong layout, or changed a weight, differs by 1e-3 and more."""


def blocked_lean(path: Path, cut: CutNames) -> tuple[ort.InferenceSession, str]:
    """The 2-D decoder on one thread with its element-wise operators kept in the blocked
    layout and its residual sums folded into the convolutions (:mod:`appliance.model.nchwc`):
    7–10 % less CPU per window.  And which graph runs, in words.

    The graph is specific to this CPU and this ONNX Runtime, so it is made on the machine
    that runs it and kept beside ``path`` under a name that says both
    (:func:`_machine_key`); a later load uses it as it is.  Made, it is used only when, on
    a probe window, it gives the samples of the graph ONNX Runtime optimised, within
    :data:`SAME_WITHIN`; else that graph runs.  It is made in a process of its own
    (:func:`make_in_child`): made in the daemon's, its sessions and ONNX Runtime's writing
    left ~13 MB of the heap behind for good, at a first start, or at every start where the
    cache cannot be written.  Loading the kept file costs less than the plain graph."""
    kept = path.with_name(f"{path.stem}.blocked-{_machine_key(path)}.onnx")
    if kept.is_file():
        try:
            return sessions.open_session(kept, 1, optimize=False), "blocked (made here before)"
        except Exception as exc:  # damaged or foreign: made again; ONNX Runtime's own types
            log.info("2-D decoder %s made again: %s", kept.name, one_line(exc))
    with tempfile.TemporaryDirectory(prefix="ttsd-nchwc-") as tmp:
        made = Path(tmp, "blocked.onnx")
        try:
            layout = make_in_child(path, cut, made)
            session = sessions.open_session(made, 1, optimize=False)
        except NotBlocked as exc:
            why = str(exc)
        except Exception as exc:  # ONNX Runtime's own types: a file the child left damaged
            why = one_line(exc)
        else:
            _keep(made, kept)
            return session, layout
    # Said once per load: the voice runs as before, 7–10 % dearer per frame ahead.
    log.info("2-D decoder kept as ONNX Runtime optimised it: %s", why)
    return sessions.open_session(path, 1), f"as optimised ({why})"


class NotBlocked(Exception):
    """Why no blocked graph was made: the rewrite's reason, a failed check, or a child
    process that did not finish (one line)."""


def make_in_child(path: Path, cut: CutNames, out: Path) -> str:
    """:func:`make` run by ``python -m appliance.model.engine.make_blocked`` in a child
    process, at most :data:`MAKE_TIMEOUT_S` (it ends with this process, too); what it
    made, in words."""
    import appliance

    module = "appliance.model.engine.make_blocked"
    cmd = [sys.executable, "-m", module, str(os.getpid()), str(path), str(out)]
    env = dict(os.environ)
    root = Path(appliance.__file__).resolve().parents[1]
    if root.name not in ("site-packages", "dist-packages"):
        # A checkout (``make run``, the tests): the child finds it where this process did,
        # whatever its working directory.  (An installed one it finds by itself; put on
        # PYTHONPATH, site-packages would come before the standard library.)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    try:
        done = subprocess.run(
            [*cmd, json.dumps(dataclasses.asdict(cut))],
            capture_output=True,
            text=True,
            errors="replace",
            timeout=MAKE_TIMEOUT_S,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise NotBlocked(f"not made within {MAKE_TIMEOUT_S:g} s") from None
    except OSError as exc:
        raise NotBlocked(f"cannot run {sys.executable}: {one_line(exc)}") from None
    lines = done.stdout.strip().splitlines()
    said = lines[-1] if lines else ""
    if done.returncode == 0 and said.startswith("blocked ("):
        return said
    if done.returncode == NOT_BLOCKED and said:
        raise NotBlocked(said)
    tail = done.stderr.strip().splitlines()
    raise NotBlocked(f"the making process ended with {done.returncode}: {tail[-1] if tail else ''}")


def make(path: Path, cut: CutNames, out: Path) -> str:
    """The blocked graph of ``path`` written to ``out`` (its directory holds the working
    files) and checked against ONNX Runtime's (see :func:`blocked_lean`); what it saves, in
    words.  NotBlocked, with nothing at ``out``, where the rewrite or the check refuses."""
    import onnx

    optimised = out.parent / "optimised.onnx"
    plain = sessions.open_session(path, 1, optimized_to=optimised)
    try:
        model, saved = keep_blocked(onnx.load(str(optimised)))
        model, sums = fold_sums(model)
        onnx.save(model, str(out))
        del model
        blocked = sessions.open_session(out, 1, optimize=False)
        probe = probe_feeds(plain, cut, 40)
        want, got = (sessions.run_session(s, probe, "layout check")[0] for s in (plain, blocked))
    except Exception as exc:  # the rewrite's ValueError, or ONNX Runtime's own types
        out.unlink(missing_ok=True)
        raise NotBlocked(one_line(exc)) from None
    if want.shape != got.shape or not float(np.max(np.abs(want - got))) <= SAME_WITHIN:
        out.unlink(missing_ok=True)
        raise NotBlocked("the blocked graph's samples differ")
    return f"blocked ({saved} layout conversions fewer per run, {sums} sums folded)"


def _keep(made: Path, kept: Path) -> None:
    """``made`` copied to ``kept`` whole or not at all; the files kept for other machines or
    other ONNX Runtimes go.  A cache that cannot be written costs only the next load's time."""
    try:
        with made.open("rb") as src, atomic.writing(kept) as dst:
            shutil.copyfileobj(src, dst)
        for old in kept.parent.glob(f"{kept.name.split('.blocked-')[0]}.blocked-*.onnx"):
            if old != kept:
                old.unlink(missing_ok=True)
    except (OSError, atomic.Abandoned) as exc:
        log.info("2-D decoder not kept for the next load: %s", one_line(exc))


def _machine_key(path: Path) -> str:
    """What the blocked graph depends on: the rewrite's version, ONNX Runtime's, the CPU's
    features (its kernels and block size follow them), and the source graph (its size and
    time)."""
    flags = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            flags = next((line for line in f if line.startswith(("flags", "Features"))), "")
    except OSError:
        flags = platform.machine()  # no /proc: the architecture stands for the features
    st = path.stat()
    text = f"{REWRITE}|{ort.__version__}|{flags.strip()}|{st.st_size}|{st.st_mtime_ns}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def probe_feeds(session: ort.InferenceSession, cut: CutNames, kept: int) -> dict[str, np.ndarray]:
    """Seeded random feeds for a decoder: ``kept`` frames and 10 of context each side
    (cropped inside, where the graph crops)."""
    rng = np.random.default_rng(0)
    frames = kept + 20
    feeds = {
        cut.z: rng.standard_normal(sessions.input_shape(session, cut.z, frames)).astype(np.float32)
    }
    if cut.g is not None:
        feeds[cut.g] = rng.standard_normal(sessions.input_shape(session, cut.g, 1)).astype(
            np.float32
        )
    if (crops := read_crops(session.get_modelmeta().custom_metadata_map)) is not None:
        feeds.update(crops.feeds(frames, 10, 10)[0])
    return feeds
