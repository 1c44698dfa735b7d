"""The backend interface every inference engine implements.

A voice is run as two halves (see ``appliance.voices``): the *encoder* turns
phoneme ids into the latent ``z`` [1, 192, T] and the frames per phoneme id
(durations); the *decoder* (HiFi-GAN) turns a window of ``z`` into 256
samples per frame.  Streaming decodes ``z`` window by window, so a backend only
has to be good at these two calls.  ``fused`` runs the whole model in one go;
it is the fallback for voices whose cut failed verification and the reference
for tests.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]


class BackendError(RuntimeError):
    """An inference call failed on this backend (the pool may retry elsewhere)."""


@dataclass(frozen=True)
class Scales:
    """Per-call synthesis scales, already resolved against the voice's defaults."""

    noise_scale: float
    length_scale: float
    noise_w: float

    def as_array(self) -> FloatArray:
        return np.array([self.noise_scale, self.length_scale, self.noise_w], dtype=np.float32)


@dataclass(frozen=True)
class Encoded:
    """Host-side result of the encoder: everything the decoder needs, kept in RAM.

    Because ``z`` lives on the host, a window can be re-decoded on another
    backend after a failure without re-running the encoder.
    """

    z: FloatArray
    """Latent, shape [1, C, T] (C = 192 for Piper VITS)."""
    durations: FloatArray
    """Frames per phoneme id, shape [N]."""
    g: FloatArray | None = None
    """Speaker conditioning for multi-speaker voices (decoder input), else None."""

    @property
    def frames(self) -> int:
        return int(self.z.shape[2])


class VoiceModel(ABC):
    """One voice loaded on one backend."""

    backend_name: str = "abstract"

    @abstractmethod
    def encode(self, ids: IntArray, scales: Scales, speaker: int | None) -> Encoded:
        """Phoneme ids [N] → latent and durations."""

    @abstractmethod
    def decode(self, z: FloatArray, g: FloatArray | None) -> FloatArray:
        """A window of latent [1, C, W] → float32 samples [W * hop]."""

    @abstractmethod
    def fused(self, ids: IntArray, scales: Scales, speaker: int | None) -> FloatArray:
        """The whole model in one call: phoneme ids → float32 samples."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release device resources."""
