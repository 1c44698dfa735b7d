"""The backend interface every inference engine implements.

A voice is run as two halves (see ``appliance.model.voices``): the *encoder* turns
phoneme ids into the latent ``z`` [1, 192, T] and the frames per phoneme id
(durations); the *decoder* (HiFi-GAN) turns a window of ``z`` into 256
samples per frame.  Streaming decodes ``z`` window by window, so a backend only
has to be good at these two calls.  A backend may also run the encoder as
prior + flow (``encode_prior`` and ``flow``), so that the flow, too, runs
window by window on a request's first clause.  ``fused`` runs the whole model in one go;
it is the fallback for voices whose cut failed verification and the reference
for tests.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np

from appliance.speech import FloatArray, IntArray


class BackendError(RuntimeError):
    """An inference call failed on this backend (the pool may retry elsewhere)."""


@dataclass(frozen=True)
class Scales:
    """Per-call synthesis scales, already resolved against the voice's defaults."""

    noise_scale: float
    length_scale: float
    noise_w: float
    seed: int | None = None
    """Draw the sampling noise from this seed (with the call's ids, scales and speaker:
    :func:`appliance.model.noise.call_seed`) where the backend can; None: fresh noise."""
    rate: float = 1.0
    """Speak this many times as fast as ``length_scale`` does.  A backend that
    :attr:`VoiceModel.retimes` runs the prior at ``length_scale`` and re-times its frames
    exactly (:mod:`appliance.model.retime`); another runs its graph at
    ``length_scale / rate`` (what :meth:`as_array` gives)."""
    anchors: tuple[int, ...] = ()
    """Re-timed, the id positions (ascending) that start where ``rate`` puts them, to half a
    frame: the clause's word starts, so word timings scale exactly with the speed.  Not in
    :meth:`as_array` (nor in a seed): they only place frames."""

    def as_array(self) -> FloatArray:
        """The graph's ``scales`` input, ``rate`` folded into the length scale."""
        length = self.length_scale / self.rate
        return np.array([self.noise_scale, length, self.noise_w], dtype=np.float32)


@dataclass
class Encoded:
    """Host-side result of the encoder: everything the decoder needs, kept in RAM.

    Because ``z`` lives on the host, a window can be re-decoded on another
    backend after a failure without re-running the encoder.
    """

    z: FloatArray
    """Latent, shape [1, C, T] (C = 192 for Piper VITS); valid on frames [0, ready)."""
    durations: FloatArray
    """Frames per phoneme id, shape [N]."""
    g: FloatArray | None = None
    """Speaker conditioning for multi-speaker voices (decoder input), else None."""
    z_p: FloatArray | None = None
    """The flow's input, kept while ``z`` is not complete (see ``encode_prior``)."""
    ready: int = -1
    """Frames of ``z`` computed so far; -1 (the default) means all of them."""
    ahead: FloatArray | None = None
    """Audio decoded ahead of what was asked for (see ``appliance.model.engine.windows``)."""
    ahead_from: int = 0
    """The frame ``ahead`` starts at."""
    base_frames: int | None = None
    """Re-timed to ``Scales.rate`` (:mod:`appliance.model.retime`): the frames the prior
    gave at rate 1; None: the graph's length scale timed it."""

    def __post_init__(self) -> None:
        if self.ready < 0:
            self.ready = self.frames

    @property
    def frames(self) -> int:
        return int(self.z.shape[2])


@dataclass(frozen=True, eq=False)
class Window:
    """A window of latent frames, the one argument of :meth:`VoiceModel.flow` and
    :meth:`VoiceModel.decode`.  It holds the arrays it is given, never a copy."""

    z: FloatArray
    """Latent [1, C, W]: ``z_p`` for the flow, ``z`` for the decoder."""
    g: FloatArray | None
    """Speaker conditioning for multi-speaker voices, else None."""
    margins: tuple[int, int] = (0, 0)
    """(left, right), the window's first and last frames that are context only; their
    frames (the flow) or samples (the decoder) are not returned, so a backend need not
    compute them (see :mod:`appliance.model.margins`).  They leave at least one frame."""
    urgent: bool = False
    """The decoder only: a listener is waiting for this very window (a request's first
    chunk), so the backend may spend more CPU to have it sooner; otherwise the window is
    decoded ahead of need and the cheapest way is the right one."""

    def __post_init__(self) -> None:
        left, right = self.margins
        if left < 0 or right < 0 or left + right >= self.frames:
            raise ValueError(
                f"margins {self.margins} leave nothing of a window of {self.frames} frames"
            )

    @property
    def frames(self) -> int:
        return int(self.z.shape[2])

    def kept(self, samples: FloatArray) -> FloatArray:
        """The decoder's ``samples`` for all of this window's frames, without the margins'
        (:func:`drop_margins`)."""
        return drop_margins(samples, self.frames, self.margins)


class VoiceModel(ABC):
    """One voice loaded on one backend.

    Every member is abstract, with no fallback here: a wrapper (the failover pool)
    that forgot to pass one on could otherwise silently lose a capability of the
    backend it wraps (the windowed flow once went missing exactly that way).
    A backend without a separate flow says so itself: ``flow_context`` 0,
    ``encode_prior`` = ``encode``, ``flow`` raising :class:`BackendError`.
    """

    backend_name: str = "abstract"

    @abstractmethod
    def encode(self, ids: IntArray, scales: Scales, speaker: int | None) -> Encoded:
        """Phoneme ids [N] → latent and durations."""

    @property
    @abstractmethod
    def flow_context(self) -> int:
        """Frames of context a window of ``flow`` needs on each side; 0: no separate flow."""

    @property
    @abstractmethod
    def retimes(self) -> bool:
        """Whether ``Scales.rate`` is applied exactly (:mod:`appliance.model.retime`) rather
        than through the graph's length scale, whose ceiling rounds short phonemes up."""

    @abstractmethod
    def encode_prior(self, ids: IntArray, scales: Scales, speaker: int | None) -> Encoded:
        """Like ``encode``, but ``z`` may be left for ``flow`` to fill (``ready`` < frames).

        Backends without a separate flow return the complete result of ``encode``.
        """

    @abstractmethod
    def flow(self, window: Window) -> FloatArray:
        """``window.z`` (``z_p``) [1, C, W] → ``z`` [1, C, W - left - right], ``window.margins``
        left out; exact inside ``flow_context``."""

    @abstractmethod
    def decode(self, window: Window) -> FloatArray:
        """``window.z`` [1, C, W] → float32 samples [(W - left - right) * hop], those of
        ``window.margins`` left out."""

    @abstractmethod
    def fused(self, ids: IntArray, scales: Scales, speaker: int | None) -> FloatArray:
        """The whole model in one call: phoneme ids → float32 samples."""

    @abstractmethod
    def release_memory(self) -> None:
        """Give back what runs left allocated and nothing holds (at a quiet moment, on any
        thread; a run going on meanwhile is safe)."""

    @abstractmethod
    def close(self) -> None:
        """Release device resources."""


def drop_margins(samples: FloatArray, frames: int, margins: tuple[int, int]) -> FloatArray:
    """The samples of a window's frames without its ``margins`` (left, right).

    ``samples`` covers ``frames`` frames; :class:`BackendError` when it cannot (a
    decoder whose output is not a whole number of samples per frame)."""
    left, right = margins
    if frames <= 0 or samples.shape[0] % frames:
        raise BackendError(f"{samples.shape[0]} samples do not cover {frames} frames")
    hop = samples.shape[0] // frames
    return samples[left * hop : (frames - right) * hop]
