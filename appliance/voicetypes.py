"""What a voice is, as data: its config, the names and paths of its cut, the loadable voice.

Shared by ``appliance.model.voices`` (which finds, cuts and verifies voices), the
engine (which loads the parts) and the phonemizer (which reads the phoneme
map); kept apart from all three so that none of them imports another for a type.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class VoiceInfo:
    """What a voice is, from its ``.onnx.json``."""

    name: str
    language: str
    espeak_voice: str
    sample_rate: int
    hop_length: int
    num_speakers: int
    speaker_id_map: dict[str, int]
    phoneme_id_map: dict[str, list[int]]
    noise_scale: float
    length_scale: float
    noise_w: float
    default_speaker: int = 0
    """The ``sid`` used when a request names no speaker: Piper's ``default_speaker_id``
    when it is one of the voice's, else 0."""
    quality: str = ""
    """Piper's ``audio.quality`` (x_low, low, medium, high), "" when the config has none."""

    @classmethod
    def from_config(cls, name: str, cfg: dict[str, Any]) -> VoiceInfo:
        inference = cfg.get("inference", {})
        num_speakers = int(cfg.get("num_speakers", 1))
        default_speaker = cfg.get("default_speaker_id", 0)
        if type(default_speaker) is not int or not 0 <= default_speaker < num_speakers:
            default_speaker = 0
        language = cfg.get("language", {}).get("code") or cfg.get("espeak", {}).get("voice", "")
        return cls(
            name=name,
            language=str(language),
            espeak_voice=str(cfg.get("espeak", {}).get("voice", "en-us")),
            sample_rate=int(cfg["audio"]["sample_rate"]),
            hop_length=int(cfg.get("hop_length", 256)),
            num_speakers=num_speakers,
            speaker_id_map={str(k): int(v) for k, v in cfg.get("speaker_id_map", {}).items()},
            phoneme_id_map={str(k): list(v) for k, v in cfg["phoneme_id_map"].items()},
            noise_scale=float(inference.get("noise_scale", 0.667)),
            length_scale=float(inference.get("length_scale", 1.0)),
            noise_w=float(inference.get("noise_w", 0.8)),
            default_speaker=default_speaker,
            quality=str(cfg.get("audio", {}).get("quality") or ""),
        )

    def speaker_id(self, speaker: str | int | None) -> int | None:
        """Resolve a client's speaker (name or number) to a ``sid``; raises KeyError."""
        if self.num_speakers <= 1:
            if speaker in (None, 0, "0"):
                return None
            raise KeyError(speaker)
        if speaker is None:
            return self.default_speaker
        if isinstance(speaker, int):
            if 0 <= speaker < self.num_speakers:
                return speaker
            raise KeyError(speaker)
        if speaker in self.speaker_id_map:
            return self.speaker_id_map[speaker]
        # A number written as text (HTTP's "voice:3"), when no speaker has that name; only
        # ASCII digits and few of them ("²".isdigit() is true, int() of 5 000 digits raises).
        if speaker.isascii() and speaker.isdigit() and len(speaker) <= 6:
            return self.speaker_id(int(speaker))
        raise KeyError(speaker)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "language": self.language,
            "sample_rate": self.sample_rate,
            "speakers": sorted(self.speaker_id_map, key=lambda s: self.speaker_id_map[s])
            if self.speaker_id_map
            else ([] if self.num_speakers <= 1 else [str(i) for i in range(self.num_speakers)]),
        }


@dataclass(frozen=True)
class CutNames:
    """Tensor names of the cut, found by pattern."""

    z: str
    durations: str
    g: str | None
    inputs: tuple[str, ...]
    output: str
    z_p: str | None = None
    """Input of the flow (prior latent with noise); None when the flow cannot be cut."""
    mask: str | None = None
    """The flow's frame mask [1, 1, T] (all ones for one unpadded utterance)."""
    flow_context: int = 0
    """Frames of ``z_p`` on each side that make a window of the flow exact."""


@dataclass(frozen=True)
class FlowSplit:
    """The encoder as two verified parts: prior (ids → z_p, durations) and flow (z_p → z)."""

    prior_path: Path
    flow_path: Path


@dataclass
class Voice:
    """A voice ready to load on a backend: its info and the paths of its halves."""

    info: VoiceInfo
    model_path: Path
    sha256: str
    encoder_path: Path | None
    decoder_path: Path | None
    cut: CutNames | None
    split_ok: bool
    split_note: str = ""
    flow_split: FlowSplit | None = None
    lean_decoder_path: Path | None = None
    """The decoder with 2-D convolutions (:mod:`appliance.model.conv2d`), when it passed the
    check."""
    context_frames: int = 16
    """Decoder frames of context on each side of a window: the fewest that passed the check."""
    margin_decoder_path: Path | None = None
    """The decoder that leaves out its windows' margins (:mod:`appliance.model.margins`), when it
    passed the check; the CPU runs it instead of ``decoder_path``."""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.info.name
