"""A voice pair's files read with bounds, and the one check of a voice's config.

A voice is ``NAME.onnx`` and ``NAME.onnx.json``.  Both must be regular files: each is
opened without blocking and checked before anything is read, so a FIFO (whose open waits
for a writer) or a device (``/dev/zero``) is refused at once.  The config is at most
:data:`MAX_CONFIG_BYTES`, the model at most :data:`MAX_MODEL_BYTES`.  Reading them (the
directory's listing, the config, the model's digest and its graph's sizes) runs in a thread
of its own with a deadline (:func:`within`): a hung network file system costs a voice, not
a wedged start, reload or stop.  A read past its deadline is left behind in a daemon
thread, and the same file is not read again while it is stuck.

:func:`check_info` is the one place that says whether a voice's config can be served: its
ranges (sample rate, scales, hop) and, against the model's graph (:class:`ModelFacts`),
its speakers and phoneme ids.  Discovery, ``ttsd voices add``, ``check-config``, the start
and every reload go through it.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import stat
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from appliance.voicetypes import VoiceInfo

_T = TypeVar("_T")


class VoiceError(Exception):
    """A voice that cannot be loaded (``appliance.model.voices.VoiceError``)."""


MAX_MODEL_BYTES = 2 << 30
"""A model larger than this is refused unread (Piper's largest voices are ~120 MB)."""
MAX_CONFIG_BYTES = 16 << 20
"""A voice config larger than this is refused unread (a 904-speaker one is ~60 KB)."""
READ_TIMEOUT_S = 30.0
"""Reading one voice's files (or listing ``voices_dir``) past this is given up."""

_stuck: set[str] = set()
_stuck_lock = threading.Lock()


def within(timeout_s: float, fn: Callable[[], _T], name: str) -> _T:
    """``fn()``'s result, or VoiceError when it has not returned within ``timeout_s``.

    ``fn`` runs in a daemon thread: a read stuck in the kernel can be neither cancelled nor
    joined, and the loop's executor joins its threads at exit (SIGTERM would wait for ever).
    While an earlier call for ``name`` is stuck, another is refused rather than started."""
    with _stuck_lock:
        if name in _stuck:
            raise VoiceError(f"{name}: an earlier read has not returned; not reading it again yet")
        _stuck.add(name)
    done = threading.Event()
    box: list[Any] = []

    def run() -> None:
        try:
            box.append((True, fn()))
        except BaseException as exc:  # handed to the caller, who reports it
            box.append((False, exc))
        finally:
            with _stuck_lock:
                _stuck.discard(name)
            done.set()

    threading.Thread(target=run, name=f"read {name}"[:60], daemon=True).start()
    if not done.wait(timeout_s):
        raise VoiceError(f"{name}: not read within {timeout_s:g} s")
    ok, value = box[0]
    if not ok:
        raise value
    result: _T = value
    return result


def is_regular(path: Path) -> bool:
    """``path`` (a symlink followed) is a regular file; False when it is missing."""
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except OSError:
        return False


def open_regular(path: Path, max_bytes: int) -> int:
    """A read-only descriptor of ``path``, which must be a regular file of at most
    ``max_bytes``; opened without blocking (a FIFO does not wait for a writer).  OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        if st.st_size > max_bytes:
            raise OSError(errno.EFBIG, f"larger than {max_bytes} bytes")
        os.set_blocking(fd, True)
    except OSError:
        os.close(fd)
        raise
    return fd


def read_bounded(path: Path, max_bytes: int) -> bytes:
    """The whole of a regular file of at most ``max_bytes`` (OSError otherwise)."""
    with os.fdopen(open_regular(path, max_bytes), "rb") as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:  # it grew after the check
        raise OSError(errno.EFBIG, f"larger than {max_bytes} bytes")
    return data


def digest_of(path: Path) -> str:
    """The sha256 of a model file (a regular file of at most :data:`MAX_MODEL_BYTES`)."""
    h = hashlib.sha256()
    with os.fdopen(open_regular(path, MAX_MODEL_BYTES), "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_info(name: str, model_path: Path) -> VoiceInfo:
    """The voice's ``.onnx.json``, checked (:func:`check_info`, without the model); VoiceError
    when it is not a usable Piper config."""
    try:
        data = read_bounded(Path(f"{model_path}.json"), MAX_CONFIG_BYTES)
        info = VoiceInfo.from_config(name, json.loads(data.decode("utf-8")))
    except OSError as exc:
        raise VoiceError(f"voice {name}: cannot read its config: {exc.strerror or exc}") from exc
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as exc:
        raise VoiceError(f"voice {name}: bad config: {exc}") from exc
    check_info(info)
    return info


@dataclass(frozen=True)
class ModelFacts:
    """What a config is checked against in the model's graph (None: not found there)."""

    phoneme_ids: int | None
    """Rows of the phoneme embedding: every phoneme id must be below."""
    speakers: int | None
    """Rows of the speaker embedding (multi-speaker voices)."""

    @classmethod
    def of_graph(cls, graph: Any) -> ModelFacts:
        """From an ONNX graph: the tables the ``Gather`` of ``input`` and of ``sid`` read."""
        sizes = {i.name: int(i.dims[0]) for i in graph.initializer if len(i.dims) == 2}
        rows: dict[str, int] = {}
        for node in graph.node:
            if node.op_type == "Gather" and len(node.input) == 2 and node.input[0] in sizes:
                rows.setdefault(node.input[1], sizes[node.input[0]])
        return cls(rows.get("input"), rows.get("sid"))

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self)), encoding="utf-8")
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> ModelFacts:
        data = json.loads(read_bounded(path, 4096))
        return cls(_count(data.get("phoneme_ids")), _count(data.get("speakers")))


def _count(value: object) -> int | None:
    if value is None:
        return None
    if type(value) is not int or value < 0:
        raise ValueError(f"not a count: {value!r}")
    return value


_RANGES: dict[str, tuple[float, float]] = {
    "audio.sample_rate": (8000, 192000),
    "hop_length": (1, 4096),
    "num_speakers": (1, 100_000),
    "inference.noise_scale": (0, 10),
    "inference.noise_w": (0, 10),
}


def check_info(info: VoiceInfo, facts: ModelFacts | None = None) -> None:
    """VoiceError naming every value of the config that cannot be served: out of range,
    or (with ``facts``) beyond what the model has."""
    values = {
        "audio.sample_rate": info.sample_rate,
        "hop_length": info.hop_length,
        "num_speakers": info.num_speakers,
        "inference.noise_scale": info.noise_scale,
        "inference.noise_w": info.noise_w,
    }
    problems = [
        f"{key} {value!r} is out of range [{lo:g}, {hi:g}]"
        for key, value in values.items()
        for lo, hi in (_RANGES[key],)
        if not (math.isfinite(value) and lo <= value <= hi)
    ]
    if not (math.isfinite(info.length_scale) and 0 < info.length_scale <= 10):
        problems.append(f"inference.length_scale {info.length_scale!r} is out of range (0, 10]")
    problems += _speaker_problems(info, facts)
    problems += _phoneme_problems(info, facts)
    if problems:
        raise VoiceError(f"voice {info.name}: bad config: {'; '.join(problems[:4])}")


def _speaker_problems(info: VoiceInfo, facts: ModelFacts | None) -> list[str]:
    problems = [
        f"speaker_id_map {name!r}: {sid} is not a speaker (num_speakers {info.num_speakers})"
        for name, sid in list(info.speaker_id_map.items())
        if not 0 <= sid < info.num_speakers
    ][:2]
    # (A graph whose speaker table is not found is not held against the config.)
    rows = facts.speakers if facts is not None else None
    if rows is not None and info.num_speakers > rows:
        problems.append(f"num_speakers {info.num_speakers}: the model has {rows}")
    return problems


def _phoneme_problems(info: VoiceInfo, facts: ModelFacts | None) -> list[str]:
    if not info.phoneme_id_map:
        return ["phoneme_id_map is empty"]
    ids = [i for group in info.phoneme_id_map.values() for i in group]
    if any(i < 0 for i in ids):
        return [f"phoneme_id_map: id {min(ids)} is negative"]
    limit = facts.phoneme_ids if facts is not None else None
    if limit is not None and max(ids, default=0) >= limit:
        return [f"phoneme_id_map: id {max(ids)} is beyond the model's {limit} phonemes"]
    return []
