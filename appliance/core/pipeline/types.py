"""The synthesis pipeline's hand-off types: what one stage gives the next.

A value that crosses from a worker to the loop is frozen (:class:`Provisional`,
:class:`EncodedClause`), and so are the settings every stage reads (:class:`VoiceRuntime`,
:class:`JobSettings`) and the loop's per-clause plan (:class:`Voiced`).  Frozen is one
level deep: the arrays, the model's :class:`~appliance.model.engine.base.Encoded` (its
latent is filled window by window as chunks are decoded) and a
:class:`~appliance.core.wordtimes.WordWork` (its words found in two parts) are owned by
one clause, and only its own work items touch them, one at a time, because the job
awaits each before it submits the next.

Mutable, and touched only on the loop: :class:`JobStats` (one request's figures) and
:class:`VoiceCosts` (a voice's measured costs: written on the loop as work items report
their times, read by the next first items' quick-start choice on a worker; a float's
read is atomic, and a stale estimate only moves a join by a few frames).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from appliance.core import wordtimes
from appliance.model.engine.base import Encoded, Scales, VoiceModel
from appliance.speech import Chunk, FloatArray, IntArray

if TYPE_CHECKING:
    from appliance.text.frontend import Clause
    from appliance.text.phonemize import Phonemizer
    from appliance.voicetypes import Voice


@dataclass
class VoiceCosts:
    """What a voice's parts take on this machine: measured at warm-up, then as served.

    A quick start sizes its first chunk from these, so that the whole sentence's prior is
    done before the listener has played it."""

    prior_s_per_id: float = 2e-4
    """Seconds of prior per phoneme id (a slow core's figure until measured)."""
    first_decode_s: float = 0.012
    """A first chunk's flow and decoder window."""
    stream_cost: float | None = None
    """CPU seconds per second of audio of a stream's later clauses, as a warm-up measured
    it (None: not yet): the last start's, kept beside the cut, until this one's."""

    def observe_prior(self, ids: int, seconds: float) -> None:
        if ids > 0 and seconds > 0:
            self.prior_s_per_id += 0.25 * (seconds / ids - self.prior_s_per_id)

    def observe_first_decode(self, seconds: float) -> None:
        if seconds > 0:
            self.first_decode_s += 0.25 * (seconds - self.first_decode_s)


@dataclass(frozen=True)
class VoiceRuntime:
    """A voice ready to serve: its phonemizer and its model on the active backend, and the
    cut it was loaded from (:attr:`source`): one object per voice, everything the runtime
    knows of it (``Runtime.voices``)."""

    name: str
    language: str
    sample_rate: int
    hop: int
    phonemizer: Phonemizer
    model: VoiceModel
    can_stream: bool
    defaults: Scales
    default_speaker: int | None
    source: Voice
    """What it was loaded from: the voice's info (speakers, quality) and the paths of its
    cut, which ``info`` describes and a reload compares with ``voices_dir``."""
    context: int = 16
    """Decoder frames of latent on each side of a streamed window."""
    costs: VoiceCosts = field(default_factory=VoiceCosts)


@dataclass(frozen=True)
class JobSettings:
    scales: Scales
    speaker: int | None
    mode: str
    realtime: bool
    context: int
    watermark_s: float
    join_fade_ms: float
    volume: float = 1.0
    quick_start: bool = True
    """A long first sentence may start from a quick encoding (:mod:`.start`)."""
    max_phonemes: int = 1024
    """Most ids of one encoder call (:mod:`appliance.model.engine.bounded`)."""
    word_timings: bool = False
    """Chunks carry their words' timings (:mod:`appliance.core.wordtimes`)."""
    visemes: bool = False
    """Chunks carry visemes (:mod:`appliance.core.visemetimes`)."""
    stretch_speed: float | None = None
    """A speed past what the voice does well (``appliance.model.stretch``): the voice renders
    at ``scales`` (its limit) and each clause is time-stretched so the whole is this fast."""
    text_stream: bool = False
    """Its text streams in: a listener that runs dry for want of text heard a text wait,
    not a stall."""
    eager: bool = False
    """Text that streams in: a sentence is spoken from its draft while it is still being
    written (``text_start: eager``, :mod:`.eager`)."""
    keepalive_ms: float = 0.0
    """Text that streams in: while the audio waits for text, a short silent chunk after
    this long without one (0: never)."""
    deterministic: bool = False
    """The same audio for the same text: seeded noise (``scales.seed``) and the same
    computation every time — no quick start (its choice depends on timing), the same
    decoder for every window and no decoding ahead (which windows run depends on load)."""


@dataclass
class JobStats:
    t_request: float
    t_first: float | None = None
    frontend_ms: float = 0.0
    first_queue_ms: float = 0.0
    first_encode_ms: float = 0.0
    first_decode_ms: float = 0.0
    first_write_ms: float = 0.0
    first_words_ms: float | None = None
    """With word timings: the word work the first packet waited for (on its work item and
    placing its words on the event loop), which ``encode`` then leaves out; None: not asked."""
    first_visemes_ms: float | None = None
    """With visemes: the first chunk's viseme work on the event loop (its spoken words'
    shapes, made and cut to the chunk); None: not asked."""
    compute_s: float = 0.0
    queue_s: float = 0.0
    audio_s: float = 0.0
    chunks: int = 0
    stalls: int = 0
    windows: int = 0
    quick_start: bool = False
    parts: dict[str, float] = field(default_factory=dict)
    text_stream: bool = False
    """Its text streams in: the text-wait figures below are reported."""
    eager: bool = False
    """Its sentences may start from drafts: the eager figures below are reported."""
    text_waits: int = 0
    """Times the listener ran dry waiting for text (an eager start waits at a word gap)."""
    text_wait_ms: float = 0.0
    keepalives: int = 0
    """Silent chunks sent while waiting for text (``keepalive_ms``)."""
    eager_sentences: int = 0
    """Sentences started from a draft (``text_start: eager``) ..."""
    eager_encodes: int = 0
    """... and the drafts encoded for them (the whole clauses' encodings not counted)."""

    def first_encoded(self, queue_s: float, run_s: float, enc: EncodedClause, words: bool) -> None:
        """The request's first item waited ``queue_s`` and ran ``run_s``: its encode, its
        first decode and (``words``: word timings asked) its word work, apart."""
        self.first_queue_ms = queue_s * 1000
        self.first_encode_ms = (run_s - enc.first_decode_s - enc.words_s) * 1000
        self.first_decode_ms = enc.first_decode_s * 1000
        if words:
            self.first_words_ms = enc.words_s * 1000

    def to_dict(self) -> dict[str, Any]:
        ttfp = (self.t_first - self.t_request) * 1000 if self.t_first is not None else None
        parts = {
            "frontend": round(self.frontend_ms, 2),
            "queue": round(self.first_queue_ms, 2),
            "encode": round(self.first_encode_ms, 2),
            "first_decode": round(self.first_decode_ms, 2),
            "write": round(self.first_write_ms, 2),
        }
        if self.first_words_ms is not None:
            parts["words"] = round(self.first_words_ms, 3)
        if self.first_visemes_ms is not None:
            parts["visemes"] = round(self.first_visemes_ms, 3)
        out: dict[str, Any] = {
            "ttfp_ms": round(ttfp, 2) if ttfp is not None else None,
            "audio_ms": round(self.audio_s * 1000, 1),
            "compute_ms": round(self.compute_s * 1000, 2),
            "queue_ms": round(self.queue_s * 1000, 2),
            "rtf": round(self.compute_s / self.audio_s, 4) if self.audio_s > 0 else None,
            "chunks": self.chunks,
            "stalls": self.stalls,
            "quick_start": self.quick_start,
            "ttfp_parts_ms": parts,
        }
        if self.text_stream:
            out.update(
                text_waits=self.text_waits,
                text_wait_ms=round(self.text_wait_ms, 1),
                keepalives=self.keepalives,
            )
        if self.eager:
            out.update(eager_sentences=self.eager_sentences, eager_encodes=self.eager_encodes)
        return out


@dataclass(frozen=True)
class Provisional:
    """A sentence's first audio from a provisional encoding (today: of its first words,
    :class:`~appliance.core.pipeline.start.QuickStart`), played up to a join where the
    next encoding (the whole sentence's) takes over.

    The join is at a word gap (``seam`` ids in, where both encodings have the same
    phonemes); a crossfade of the join fade just before it hides the seam."""

    seam: int
    """The join comes after this many phoneme ids (the same in both encodings)."""
    frames: int
    """Frames of the provisional audio before the join."""
    audio: FloatArray
    """Those frames' samples but the last ``tail``."""
    tail: FloatArray
    """The samples crossfaded with the next encoding's just before the join."""
    ids: IntArray
    durations: FloatArray
    """The provisional encoding's ids and their frames (its marks come from these)."""
    decode_s: float = 0.0
    """Its flow and decoder time."""
    stretch: float = 1.0
    """Past the voice's speed: the time-stretch of its audio (from its own frames, as
    :func:`~appliance.core.pipeline.shape.stretch_factor` has it for a whole clause)."""


@dataclass(frozen=True)
class EncodedClause:
    """A clause's encode work item's result (:mod:`.encode`, on a worker)."""

    ids: IntArray
    enc: Encoded | None
    audio: FloatArray | None
    """Whole-clause audio, for voices that cannot stream."""
    # The first clause of a request also carries its chunk plan and first chunk, decoded
    # in the same work item: a separate item would queue behind other streams' work
    # while the listener waits for the first sound.
    chunks: list[tuple[int, int]] | None = None
    target: int = 0
    first_audio: FloatArray | None = None
    first_decode_s: float = 0.0
    opening: Provisional | None = None
    """A start strategy's first audio (:mod:`.start`); then ``enc`` is None: the whole
    sentence is encoded while it plays."""
    written: list[wordtimes.WrittenWord] | None = None
    """With word timings: the clause's written words and their ids (made on the worker:
    the alignment may phonemize words); for a request's first clause, only the first
    ones (those its first chunk needs) while ``words_left`` is set."""
    words_left: wordtimes.WordWork | None = None
    """The rest of a first clause's word work, done on its next chunk's work item: off
    the first packet's path (issue 29's cost)."""
    words_s: float = 0.0
    """Seconds this item spent finding words (a first clause's: ``JobStats.first_words_ms``)."""
    prior_s: float = 0.0
    """Seconds of the whole clause's prior in this item (a plain start's; 0: not run here)."""


WordKeep = Callable[[wordtimes.WrittenWord], bool]
"""Which of a clause's words a call places."""


@dataclass(frozen=True)
class PendingWords:
    """A clause's words found after its first chunk went out: where they sound (``at``),
    which of them to place (``keep``: those not placed with the first chunk)."""

    work: wordtimes.WordWork
    at: wordtimes.IdTime
    keep: WordKeep


@dataclass(frozen=True)
class Voiced:
    """How one clause's frames become output (on the loop): its chunks and where its
    audio goes in time."""

    clause: Clause
    encoded: EncodedClause
    chunks: list[tuple[int, int]]
    total: int
    """Frames of the clause (of its whole encoding)."""
    speech_ms: float
    """Output time where the clause's frame 0 sounds (after its ``pause_before_ms``); after a
    join, where it would have to for frame ``seam`` to sound at the join."""
    pauses: Mapping[int, int] = field(default_factory=dict)
    """Frame → ms of silence spliced in after it (SSML breaks between words)."""
    seam: int = 0
    """After a provisional start: the whole encoding's frame its audio joins at."""
    lead: FloatArray | None = None
    """Samples crossfaded into the first chunk's (a provisional start's tail)."""

    def at_ms(self, frame: float, frame_ms: float, after: Callable[[int], bool]) -> float:
        """Output time of a frame; a pause at that very frame counts when ``after`` it."""
        quiet = (  # twice per word on the first packet's path: most clauses have no pause
            sum(ms for f, ms in self.pauses.items() if f < frame or (f == frame and after(f)))
            if self.pauses
            else 0
        )
        return self.speech_ms + frame * frame_ms + quiet


Emit = Callable[[Chunk], Awaitable[None]]


@dataclass(frozen=True)
class Place:
    """Where a chunk stands in the request: the characters it says, and whether it ends a
    sentence or the request (its ``Chunk``'s ``text_span``, ``sentence_end``, ``final``)."""

    span: tuple[int, int]
    sentence_end: bool = False
    final: bool = False


"""Hands one chunk to its door (which applies back-pressure by taking its time)."""
