"""The operator's voice commands: check a voice pair, add one to ``voices_dir``, remove one.

``ttsd voices add`` and ``ttsd check-config`` call these; nothing here runs in the daemon.
A pair is a Piper ``NAME.onnx`` and its ``NAME.onnx.json``.  :func:`check_pair` is the cheap
check (the config is a Piper config, the graph parses and has Piper's inputs: no session,
no cut), the one ``check-config`` makes; :func:`add_voice` also prepares the cut and keeps
the voice only when it streams exactly (the cut's check against the whole model passes).
Files are copied under names discovery does not read (``.NAME.onnx.part``) and renamed into
place config first, so a daemon reloading meanwhile sees the whole pair or none of it.  Only
regular files are copied (a symlink to ``/dev/zero`` or a FIFO is refused, not read), each
checked against its size cap before a byte is copied, and the copy stops at the cap.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

from appliance.model.voices.discover import _NAME_RE, VoiceError, bundled_voice_path, discover
from appliance.model.voices.load import check_graph, load_voice
from appliance.model.voices.pair import (
    MAX_CONFIG_BYTES,
    MAX_MODEL_BYTES,
    READ_TIMEOUT_S,
    check_info,
    open_regular,
    read_info,
    within,
)
from appliance.voicetypes import Voice, VoiceInfo


def check_pair(name: str, model_path: Path) -> VoiceInfo:
    """The voice's config, when the pair looks like a Piper voice and its config fits the
    model; else VoiceError saying what is wrong (:func:`~appliance.model.voices.load.check_graph`,
    :func:`~appliance.model.voices.pair.check_info`)."""

    def check() -> VoiceInfo:
        info = read_info(name, model_path)
        try:
            facts = check_graph(model_path, info)
        except VoiceError as exc:
            raise VoiceError(f"voice {name}: {exc}") from None
        check_info(info, facts)
        return info

    return within(READ_TIMEOUT_S, check, f"voice {name}")


def check_dir(voices_dir: str | None) -> dict[str, str]:
    """Every problem :func:`check_pair` (or discovery) finds there: file → why."""
    problems: dict[str, str] = {}
    for name, path in discover(voices_dir, problems).items():
        try:
            check_pair(name, path)
        except VoiceError as exc:
            problems[str(path)] = str(exc)
    return problems


def add_voice(
    model: Path,
    config: Path | None,
    voices_dir: Path,
    cache_dir: Path,
    say: Callable[[str], None],
) -> Voice:
    """Copy the pair into ``voices_dir`` and prepare its cut; VoiceError (nothing left
    behind) when it is not a voice, its name is taken, or it does not stream exactly."""
    name = model.name.removesuffix(".onnx")
    config = config or Path(f"{model}.json")
    if not model.name.endswith(".onnx") or not _NAME_RE.match(name):
        raise VoiceError(f"{model}: a voice file is NAME.onnx (letters, digits, . _ -)")
    if name in discover(str(voices_dir)) or name == bundled_voice_path().name[:-5]:
        raise VoiceError(f"a voice named {name} exists already (ttsd voices remove {name})")
    voices_dir.mkdir(parents=True, exist_ok=True)
    dest = voices_dir / f"{name}.onnx"
    part = voices_dir / f".{name}.onnx.part"
    part_json = Path(f"{part}.json")
    try:
        _copy_regular(config, part_json, MAX_CONFIG_BYTES)
        _copy_regular(model, part, MAX_MODEL_BYTES)
        check_pair(name, part)
        say(f"{name}: copied into {voices_dir}; checking the cut")
        voice = load_voice(name, part, cache_dir)
        if not voice.split_ok:
            raise VoiceError(f"{name}: cannot stream it exactly: {voice.split_note}")
        os.replace(part_json, f"{dest}.json")
        os.replace(part, dest)
    except OSError as exc:
        raise VoiceError(f"{name}: cannot copy: {exc.strerror or exc}") from exc
    finally:
        part.unlink(missing_ok=True)
        part_json.unlink(missing_ok=True)
    return voice


def _copy_regular(src: Path, dest: Path, max_bytes: int) -> None:
    """``src`` (a regular file of at most ``max_bytes``, symlinks followed) copied to ``dest``
    from the descriptor checked, never more than ``max_bytes``.  OSError says what is wrong."""
    try:
        fd = open_regular(src, max_bytes)
    except OSError as exc:
        raise OSError(exc.errno, f"{src}: {exc.strerror}") from None
    left = max_bytes
    with os.fdopen(fd, "rb") as f, dest.open("wb") as out:
        while block := f.read(min(1 << 20, left + 1)):
            left -= len(block)
            if left < 0:  # it grew after the check
                raise OSError(errno.EFBIG, f"{src}: grew past {max_bytes} bytes while copied")
            out.write(block)


def remove_voice(name: str, voices_dir: Path) -> list[Path]:
    """Delete ``NAME.onnx`` and its config from ``voices_dir`` (the files removed); the
    bundled voice is not in it and cannot be removed."""
    if name == bundled_voice_path().name.removesuffix(".onnx"):
        raise VoiceError(f"{name} is the bundled voice: it cannot be removed")
    path = discover(str(voices_dir)).get(name)
    if path is None or path.parent.resolve() != voices_dir.resolve():
        raise VoiceError(f"no voice named {name} in {voices_dir}")
    gone = []
    for p in (path, Path(f"{path}.json")):
        p.unlink(missing_ok=True)
        gone.append(p)
    return gone
