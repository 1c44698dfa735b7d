"""Typed settings, read from YAML and validated in one place.

Every section is a frozen dataclass.  ``parse_config`` walks the YAML mapping
against the dataclass fields, so an unknown key, a wrong type or an out-of-range
value is reported with its full key path (``playback.devcie: unknown key (did
you mean device?)``), every one of a file's problems at once (:class:`ConfigError`'s
``problems``).  Range limits live next to the field as metadata, and so does whether a
reload may change the key while the daemon runs (``live``, :func:`live_keys`).

``ttsd serve``'s options that set keys (:data:`Flags`) are a layer laid over the file each
time it is read, at start and on every reload: the daemon has one typed config, and a
reload compares it with the file read the same way.
"""

from __future__ import annotations

import dataclasses
import difflib
import errno
import logging
import math
import os
import reprlib
import stat
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from appliance.speech import SAMPLE_RATE

DEFAULT_CONFIG_PATH = Path("/etc/ttsd/config.yaml")

log = logging.getLogger(__name__)


class ConfigError(ValueError):
    """A configuration file that cannot be used; each problem names its key path.

    ``problems`` holds every one found (``check-config`` prints them all); the message is
    the first, with how many more there are."""

    def __init__(self, *problems: str) -> None:
        self.problems: list[str] = list(problems) or ["invalid config"]
        more = len(self.problems) - 1
        super().__init__(self.problems[0] + (f" (and {more} more)" if more else ""))


def _rng(lo: float | None = None, hi: float | None = None, *, live: bool = False) -> dict[str, Any]:
    """A field's metadata: its range, and whether a reload may change it while the daemon
    runs (``live``; every other key needs a restart)."""
    return {"range": (lo, hi), "live": live}


LIVE: dict[str, Any] = {"live": True}
"""The metadata of a live field without a range."""


@dataclass(frozen=True)
class V1Config:
    """Protocol v1's Unix socket, and who may connect to it (a Wyoming ``unix://`` socket
    checks its peers by the same rules, with its own ``wyoming.*`` settings)."""

    socket: str | None = None
    """Socket path; None: /run/ttsd/ttsd.sock as root, else $XDG_RUNTIME_DIR/ttsd/ttsd.sock."""
    socket_mode: int = field(default=0o660, metadata=_rng(0, 0o777))
    allowed_uids: tuple[int, ...] = ()
    """Extra uids allowed to connect (the daemon's own uid and root always are)."""
    allowed_gids: tuple[int, ...] = ()
    """Extra gids allowed to connect (members of the socket's group always are)."""
    text_format: Literal["text", "markdown"] = "text"
    """How a request that names no ``text_format`` is read (docs/markdown.md)."""
    text_start: Literal["eager", "sentence"] = "eager"
    """How a text stream that names no ``text_start`` starts a sentence: ``eager`` from its
    first words while it is being written, ``sentence`` once it is complete
    (docs/textstream.md)."""


@dataclass(frozen=True)
class LimitsConfig:
    """The limits every door shares (appliance.doors.net reads them), and the core's."""

    max_message_bytes: int = field(default=65536, metadata=_rng(1024, 16 * 1024 * 1024))
    max_text_chars: int = field(default=20000, metadata=_rng(1, 1_000_000, live=True))
    max_connections: int = field(default=256, metadata=_rng(1, 100_000, live=True))
    max_connections_per_uid: int = field(default=64, metadata=_rng(1, 100_000, live=True))
    max_inflight_per_connection: int = field(default=16, metadata=_rng(1, 10_000, live=True))
    max_output_buffer_bytes: int = field(
        default=2 * 1024 * 1024, metadata=_rng(65536, 1 << 30, live=True)
    )
    client_too_slow_s: float = field(default=30.0, metadata=_rng(0.1, 3600, live=True))
    shutdown_timeout_s: float = field(default=5.0, metadata=_rng(0, 600, live=True))
    reserved_connections: int = field(default=4, metadata=_rng(0, 1000, live=True))
    """Connection slots only root and the daemon's own user may take (a health check gets
    in however many connections others hold)."""
    idle_timeout_s: float = field(default=300.0, metadata=_rng(0, 86400, live=True))
    """A connection with no request in flight and nothing received for this long is
    closed; 0 = never."""
    frame_timeout_s: float = field(default=10.0, metadata=_rng(0.1, 3600, live=True))
    """A message begun but not finished within this long: ``bad_request``, closed."""
    max_streams: int = field(default=256, metadata=_rng(1, 100_000, live=True))
    """Daemon-wide cap on synthesis requests in flight, whatever door they came from."""
    reserved_fds: int = field(default=256, metadata=_rng(0, 100_000, live=True))
    """File descriptors the TCP doors (HTTP, Wyoming) leave free: a TCP connection that
    would leave fewer is not kept, so the Unix socket's reserved connections and the
    daemon's own files still get one however many TCP connections arrive.  More than a
    listener accepts in one go (asyncio takes up to its backlog, 128, before the door
    sees the first) plus the HTTP door's refusals in flight (32)."""
    drain_notice_s: float = field(default=2.0, metadata=_rng(0, 600, live=True))
    """On SIGTERM, how long the box says ``drain`` (agent) and 503 (``/healthz``,
    ``/readyz``) while still serving, before it stops taking requests: a load balancer's
    check interval or two, so it moves new work away first (docs/scale-out.md).  Only
    when the HTTP door or the agent is on; a second SIGTERM skips it."""


@dataclass(frozen=True)
class VoicesConfig:
    default: str = "en_US-joe-medium"
    voices_dir: str | None = None
    cache_dir: str | None = None
    """Split models are cached here; None = $XDG_CACHE_HOME/ttsd (or /var/cache/ttsd as root)."""
    lexicon: str | None = field(default=None, metadata=LIVE)
    """The user's lexicon (YAML, see docs/ssml.md); read at start and on SIGHUP."""
    lexicon_timeout_s: float = field(default=10.0, metadata=_rng(0.1, 600, live=True))
    """Reading, parsing and checking the lexicon past this is given up (a hung network file
    system): at start the daemon stops, on SIGHUP the old lexicon is kept."""
    deterministic: bool = False
    """The default of a request's ``deterministic``: sampling noise seeded from the text and
    settings, so the same phrase is the same audio every time (docs/telephony.md)."""

    def __post_init__(self) -> None:
        if self.lexicon is not None and (not self.lexicon.strip() or "\0" in self.lexicon):
            raise ConfigError("voices.lexicon: must be a file path")


@dataclass(frozen=True)
class EngineConfig:
    backend: Literal["auto", "tensorrt", "onnx-cpu"] = "auto"
    workers: int = field(default=2, metadata=_rng(1, 64))
    """Inference worker threads.  Two single-threaded workers beat one two-threaded one on a
    2-core box at 1, 4 and 8 streams (docs/scheduling.md): a newcomer finds a free worker."""
    intra_op_threads: int = field(default=0, metadata=_rng(0, 256))
    """ONNX Runtime threads per worker; 0 = the CPUs this process may use (no more than its
    cgroup's CPU quota rounds up to) shared out between the workers, at least one each
    (they spin-wait only when the workers together leave a CPU free)."""
    spin_wait: Literal["auto", "on", "off"] = "auto"
    """ONNX Runtime threads spin between ops (faster, but they hold a core): auto = only when
    all workers' threads together leave at least one CPU free."""
    pin_threads: Literal["auto", "off"] = "auto"
    """auto: each worker on its own CPU and ONNX Runtime's pool threads on the others, so a
    lone request's threads never share one CPU (after a second of quiet they did here, and
    its first packet came 5 ms later); off: wherever the kernel puts them (a box whose CPUs
    other busy programs share).  See appliance.model.engine.threads.pinning."""
    context_frames: int | None = field(default=None, metadata=_rng(0, 128))
    """Decoder frames of latent on each side of a streamed window; None = each voice's own,
    the fewest that pass the cut's exactness check (10 for the bundled voice, else 16)."""
    keep_warm_s: float = field(default=30.0, metadata=_rng(0.0, 3600.0, live=True))
    """Latency option, on by default; 0 turns it off: for this many seconds after each
    request, the voice it used runs on one word every second in which the model ran
    nothing else.  On a host whose CPU slows when idle (this 2-vCPU VM: an arithmetic loop
    ran 2.7x slower after a second of quiet), the short command's first packet after 3 s
    of quiet took 149 ms instead of 39 (another day 48 against 34); kept warm, 34–55.
    Costs 2–6 % of one core while it lasts, nothing while requests keep the model running
    (docs/speed.md, "Kept warm" and stop 68)."""
    max_phonemes: int = field(default=1024, metadata=_rng(16, 4096))
    """Most phoneme ids of one encoder call, on every backend (the encoder's memory grows
    about quadratically with them).  A sentence up to ``streaming.max_sentence_chars``
    has ~2 ids a character; a clause with more (a long <phoneme>, lexicon respellings, a
    very long word) is encoded in pieces cut at word gaps (docs/speed.md)."""


@dataclass(frozen=True)
class StreamingConfig:
    default_mode: Literal["dialog", "reading", "sentence"] = "dialog"
    max_sentence_chars: int = field(default=400, metadata=_rng(40, 5000))
    """A sentence up to this long is encoded whole, as piper-tts does (its prosody is
    piper's); a longer one is cut at ``; :`` or a dash, then at a comma, and at a bare
    space only where one clause alone is longer."""
    first_clause_chars: int = field(default=0, metadata=_rng(0, 5000))
    """Latency option, off (0) by default: the request's first sentence is cut after at
    most this many characters (at a clause mark, else a space), so its encoder runs on
    less text.  Costs prosody: an intonation reset and a pause where the cut falls
    (docs/speed.md, "Whole sentences")."""
    quick_start: bool = True
    """A long first sentence starts from a quick encoding of its first words while the
    whole sentence is encoded; the two join at a word gap inside the first 250 ms, and
    everything after it is the whole sentence's audio (docs/speed.md)."""
    join_fade_ms: float = field(default=4.0, metadata=_rng(0, 50))
    text_first_chars: int = field(default=40, metadata=_rng(1, 5000, live=True))
    """Text that streams in: the first segment is also released at a clause mark
    (, ; : or a dash) once it holds this many characters."""
    text_max_chars: int = field(default=400, metadata=_rng(20, 5000, live=True))
    """Text that streams in: a segment never waits for more than this many characters (cut
    at its last ``; :`` or dash, else comma, else space: the frontend's long-sentence rule)."""
    text_idle_ms: float = field(default=300.0, metadata=_rng(0, 60000, live=True))
    """Text that streams in: after this long without new text, what is buffered is spoken
    up to its last word boundary (the only time a segment ends at a bare space)."""
    text_low_water_ms: float = field(default=400.0, metadata=_rng(0, 60000, live=True))
    """Text that streams in: when the listener has less than this much audio left, a
    waiting segment is released at its last clause mark; 0 = never."""
    text_timeout_s: float = field(default=60.0, metadata=_rng(0.1, 86400, live=True))
    """Text that streams in: a stream with no append and no finish for this long ends with
    ``text_timeout``."""


@dataclass(frozen=True)
class SchedulerConfig:
    watermark_ms: float = field(default=400.0, metadata=_rng(0, 10000, live=True))
    admission_backlog_ms: float = field(default=1000.0, metadata=_rng(0, 600000, live=True))
    admission_window_s: float = field(default=10.0, metadata=_rng(0, 3600, live=True))
    """Admission refuses while real-time work has on average finished more than
    ``admission_backlog_ms`` past its deadlines over this many seconds."""
    admission_max_load: float = field(default=0.4, metadata=_rng(0.05, 64, live=True))
    """Admission refuses a real-time stream when the streams still producing plus the
    newcomer would claim more than this share of the inference workers' time."""
    admission_cpu_wait: float = field(default=0.3, metadata=_rng(0, 1, live=True))
    """Beside other work: while the daemon's threads wait for a CPU more than this share of
    the time they could run (``stats.scheduler.cpu_wait``), ``admission_max_load`` shrinks
    to ``max_load × (1 − wait) / (1 − admission_cpu_wait)``; 1 turns it off."""


@dataclass(frozen=True)
class PlaybackConfig:
    enabled: bool = True
    device: str | int | None = None
    """PortAudio output device (name substring or index); None = the default device."""
    sample_rate: int | None = field(default=None, metadata=_rng(*SAMPLE_RATE))
    """None = the device's preferred rate; voices are resampled to it."""
    latency: str | float = "low"
    """"low", "high" or seconds, as PortAudio takes it."""
    blocksize: int = field(default=0, metadata=_rng(0, 65536))
    """Frames per callback; 0 lets PortAudio pick (lowest latency)."""
    realtime_priority: int = field(default=10, metadata=_rng(0, 99))
    """SCHED_FIFO priority of the audio callback thread; 0 = do not ask for real-time."""
    nice: int = field(default=-10, metadata=_rng(-20, 0))
    """Nice value for the audio thread when real-time scheduling is refused; 0 = leave it."""
    fade_ms: float = field(default=5.0, metadata=_rng(0.5, 5.0))
    """Fade-out on stop/cancel/interrupt, so the cut does not click."""
    reopen_min_s: float = field(default=0.5, metadata=_rng(0.01, 60))
    reopen_max_s: float = field(default=10.0, metadata=_rng(0.01, 600))
    """Back-off bounds for reopening a lost output device."""

    def __post_init__(self) -> None:
        if isinstance(self.latency, str) and self.latency not in ("low", "high"):
            raise ConfigError(
                f"playback.latency: must be low, high or seconds, got {_show(self.latency)}"
            )
        if isinstance(self.latency, float) and not 0 < self.latency <= 2:
            raise ConfigError(f"playback.latency: {self.latency!r} is out of range (0, 2] seconds")


@dataclass(frozen=True)
class TuningConfig:
    cpus: Literal["all", "gpu-node"] = "all"
    """CPUs whose governor is set: every online CPU, or the online CPUs of the GPU's NUMA node."""
    governor: bool = True
    energy_performance_preference: bool = False
    """Also set the Intel/AMD EPP hint to ``performance`` where the driver offers it."""
    gpu_clocks: bool = True
    gpu_clock_mhz: int | None = field(default=None, metadata=_rng(1, 100000))
    """Locked GPU clock; None = the highest supported graphics clock."""
    memory_clock_mhz: int | None = field(default=None, metadata=_rng(1, 100000))
    """Locked memory clock; None = memory clocks are left alone."""
    persistence_mode: bool = True
    irq_affinity: bool = True
    numa_bind: bool = False
    """``ttsd serve`` binds itself to the GPU's NUMA node before any thread starts."""
    numa_mempolicy: Literal["preferred", "bind", "none"] = "preferred"
    """Memory policy of that binding: ``bind`` fails allocations when the node is full."""
    state_file: str = "/run/ttsd-tuning/tuning.json"
    """Originals are saved here (inside ``root``) before anything changes.  Its directory
    and every one above it must be writable by root only (not /run/ttsd, which belongs
    to the service user): ``tune revert`` writes what the file says, as root."""
    gpu_index: int = field(default=0, metadata=_rng(0, 64))
    root: str = "/"
    """Prefix of every sysfs/procfs/state path; tests point it at a fake tree."""


@dataclass(frozen=True)
class GpuConfig:
    device_index: int = field(default=0, metadata=_rng(0, 64))
    precision: Literal["fp16", "fp32"] = "fp16"
    watchdog: bool = True
    watchdog_interval_ms: float = field(default=500.0, metadata=_rng(10, 60000))
    recovery_healthy_s: float = field(default=60.0, metadata=_rng(0, 86400))
    min_snr_db: float = field(default=25.0, metadata=_rng(0, 200))
    engine_dir: str | None = None
    """TensorRT engine cache; None = $CACHE_DIRECTORY/engines, else <voices cache>/engines."""
    decoder_frames: tuple[int, ...] = (16, 48, 128)
    """Decoder engine frame range (min, opt, max); opt = the usual streaming window."""

    def __post_init__(self) -> None:
        frames = self.decoder_frames
        if len(frames) != 3 or not 1 <= frames[0] <= frames[1] <= frames[2] <= 4096:
            raise ConfigError(
                f"gpu.decoder_frames: want [min, opt, max] with 1 <= min <= opt <= max <= 4096,"
                f" got {_show(list(frames))}"
            )
        if frames[2] <= 32:
            raise ConfigError(
                "gpu.decoder_frames: max must exceed 32 (16 frames context each side)"
            )


@dataclass(frozen=True)
class HttpConfig:
    """The OpenAI-compatible HTTP door, health check and metrics (docs/http.md)."""

    listen: str | None = None
    """``HOST:PORT`` (``[::1]:8880`` for IPv6); None = off.  Anything but loopback needs a key."""
    api_key: str | None = None
    """Requests then need ``Authorization: Bearer KEY`` (``/healthz`` excepted)."""
    api_key_file: str | None = None
    """A file holding the key (first line), read at start: keeps it out of the config."""
    voice_map: dict[str, str] = field(default_factory=dict)
    """OpenAI voice name (``alloy`` …) → ttsd voice, or ``VOICE:SPEAKER`` for one speaker of a
    multi-speaker voice; unlisted OpenAI names get the default."""
    max_connections: int = field(default=64, metadata=_rng(1, 100_000))
    """Connections at once, each counted from accept (the oldest one still waiting for a
    request gives way to a newcomer when the door is full)."""
    max_body_bytes: int = field(default=1024 * 1024, metadata=_rng(1024, 1024 * 1024))
    max_header_bytes: int = field(default=16384, metadata=_rng(1024, 1024 * 1024))
    """The request line and headers together; beyond: 431, closed."""
    header_timeout_s: float = field(default=5.0, metadata=_rng(0.1, 3600))
    """A request head must begin within this (on a new connection, or between requests on
    one that has not passed the key check) and never pause longer."""
    head_timeout_s: float = field(default=10.0, metadata=_rng(0.1, 3600))
    """The whole request head within this of its first byte (slowloris): 408, closed."""
    max_whole_audio_s: float = field(default=600.0, metadata=_rng(1, 3600))
    """A whole reply (``stream: false``, captioned JSON, ``vtt``/``srt``) is made before it
    is sent: at most this much audio, and 96 kB of it held a second (48 kHz 16-bit), else
    400 ``text_too_long`` (docs/http.md, "Whole replies")."""
    text_format: Literal["text", "markdown"] = "markdown"
    """How ``input`` is read when the body names no ``text_format``: chat UIs send what a
    language model wrote (docs/markdown.md)."""


@dataclass(frozen=True)
class ElevenLabsConfig:
    """ElevenLabs' input-streaming WebSocket on the HTTP listener (docs/agents.md): voice
    agents (Pipecat, LiveKit Agents) stream a language model's tokens in."""

    text_start: Literal["eager", "sentence"] = "eager"
    """How a context starts a sentence: ``eager`` from its first words while it is being
    written, ``sentence`` once it is complete (docs/textstream.md)."""
    max_connections: int = field(default=32, metadata=_rng(1, 100_000))
    """WebSockets at once (each also holds one of ``http.max_connections``): speech over
    plain HTTP keeps room however many agents are connected."""
    max_contexts: int = field(default=8, metadata=_rng(1, 1000, live=True))
    """Contexts open at once on one connection (ElevenLabs allows 5)."""
    max_messages_per_s: float = field(default=200.0, metadata=_rng(1, 100_000, live=True))
    """Messages a connection may send a second, averaged over a burst of twice as many."""
    max_inactivity_timeout_s: float = field(default=180.0, metadata=_rng(1, 86_400, live=True))
    """The cap on a client's ``inactivity_timeout`` (ElevenLabs' own cap: 180 s)."""


@dataclass(frozen=True)
class WyomingConfig:
    """The Wyoming door (Home Assistant): see docs/wyoming.md."""

    uri: str | None = None
    """``tcp://HOST:PORT`` or ``unix://PATH``; None = off."""
    text_format: Literal["text", "markdown"] = "markdown"
    """How a ``synthesize`` that names no ``text_format`` is read: Home Assistant's
    conversation agents send what a language model wrote (docs/markdown.md)."""
    text_start: Literal["eager", "sentence"] = "eager"
    """How streaming synthesis (``synthesize-start``) starts a sentence: ``eager`` from its
    first words while it is being written, ``sentence`` once it is complete
    (docs/textstream.md)."""
    zeroconf: bool = False
    """Advertise ``_wyoming._tcp.local.`` (tcp only; needs the ``zeroconf`` package)."""
    zeroconf_name: str | None = None
    """The advertised instance name; None = ``ttsd-<hostname>``."""
    allowed_networks: tuple[str, ...] = ("127.0.0.0/8", "::1/128")
    """tcp: client addresses allowed to connect (Wyoming has no authentication); only
    loopback by default, so a Home Assistant on another host needs its network here
    (``--wyoming-allow``)."""
    socket_mode: int = field(default=0o660, metadata=_rng(0, 0o777))
    """unix: the socket file's mode (as ``v1.socket_mode``, of which it is independent)."""
    allowed_uids: tuple[int, ...] = ()
    """unix: extra uids allowed to connect (the daemon's own uid and root always are)."""
    allowed_gids: tuple[int, ...] = ()
    """unix: extra gids allowed to connect (members of the socket's group always are)."""

    def __post_init__(self) -> None:
        import ipaddress

        if self.uri is not None:
            wyoming_endpoint(self.uri)
        for i, net in enumerate(self.allowed_networks):
            try:
                ipaddress.ip_network(net, strict=False)
            except ValueError as exc:
                raise ConfigError(f"wyoming.allowed_networks[{i}]: {exc}") from None


def wyoming_endpoint(uri: str) -> tuple[str, str, int]:
    """``("tcp", host, port)`` or ``("unix", path, 0)``; ConfigError names the key."""
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"wyoming.uri: {exc}") from None
    if parts.scheme == "tcp" and parts.hostname and port is not None and not parts.path:
        return "tcp", parts.hostname, port
    if parts.scheme == "unix" and (parts.netloc + parts.path) and not parts.query:
        return "unix", parts.netloc + parts.path, 0
    raise ConfigError(f"wyoming.uri: want tcp://HOST:PORT or unix://PATH, got {uri!r}")


@dataclass(frozen=True)
class MarkdownConfig:
    """How ``text_format: markdown`` is read (docs/markdown.md)."""

    code_blocks: Literal["skip", "say", "read"] = "skip"
    """Fenced and indented code: not read, ``code_phrase`` said instead, or read."""
    code_phrase: str = "There is a code sample here."
    heading_pause_ms: int = field(default=300, metadata=_rng(0, 5000))
    """Silence after a heading."""
    rule_pause_ms: int = field(default=500, metadata=_rng(0, 5000))
    """Silence at a horizontal rule."""

    def __post_init__(self) -> None:
        if len(self.code_phrase) > 200:
            raise ConfigError("markdown.code_phrase: at most 200 characters")


@dataclass(frozen=True)
class AgentConfig:
    """HAProxy's agent-check responder (appliance.doors.agent, docs/scale-out.md)."""

    listen: str | None = None
    """``HOST:PORT``; None = off.  Anything but loopback needs ``allowed_networks`` naming
    the balancers (the agent protocol carries no key)."""
    allowed_networks: tuple[str, ...] = ("127.0.0.0/8", "::1/128")
    """Addresses the balancers check from; others are closed unanswered."""
    max_connections: int = field(default=16, metadata=_rng(1, 10_000))
    """Checks answered at once; beyond, a newcomer is closed at once."""
    timeout_s: float = field(default=2.0, metadata=_rng(0.1, 60))
    """A check's whole life: the answer, then the balancer's close."""

    def __post_init__(self) -> None:
        import ipaddress

        for i, net in enumerate(self.allowed_networks):
            try:
                ipaddress.ip_network(net, strict=False)
            except ValueError as exc:
                raise ConfigError(f"agent.allowed_networks[{i}]: {exc}") from None


@dataclass(frozen=True)
class LoggingConfig:
    level: Literal["debug", "info", "warning", "error"] = field(default="info", metadata=LIVE)


@dataclass(frozen=True)
class Config:
    v1: V1Config = field(default_factory=V1Config)
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    voices: VoicesConfig = field(default_factory=VoicesConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    streaming: StreamingConfig = field(default_factory=StreamingConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    playback: PlaybackConfig = field(default_factory=PlaybackConfig)
    tuning: TuningConfig = field(default_factory=TuningConfig)
    gpu: GpuConfig = field(default_factory=GpuConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    http: HttpConfig = field(default_factory=HttpConfig)
    wyoming: WyomingConfig = field(default_factory=WyomingConfig)
    elevenlabs: ElevenLabsConfig = field(default_factory=ElevenLabsConfig)
    markdown: MarkdownConfig = field(default_factory=MarkdownConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)


def live_keys(cls: type[Any] = Config, prefix: str = "") -> frozenset[str]:
    """The keys (``section.key``) a reload may change while the daemon runs: the fields
    whose metadata says ``live``.  Everything else needs a restart."""
    keys: set[str] = set()
    for f in dataclasses.fields(cls):
        tp = typing.get_type_hints(cls)[f.name]
        if dataclasses.is_dataclass(tp) and isinstance(tp, type):
            keys |= live_keys(tp, f"{prefix}{f.name}.")
        elif f.metadata.get("live"):
            keys.add(f"{prefix}{f.name}")
    return frozenset(keys)


def _type_name(tp: Any) -> str:
    if isinstance(tp, type):
        return tp.__name__
    return str(tp).replace("typing.", "")


def _convert(path: str, tp: Any, value: Any) -> Any:
    """Check ``value`` against the annotation ``tp``; return it (tuples from lists)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        errors = []
        for arm in typing.get_args(tp):
            try:
                return _convert(path, arm, value)
            except ConfigError as exc:
                errors.append(exc)
        raise ConfigError(f"{path}: expected {_type_name(tp)}, got {_show(value)}")
    if origin is Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            raise ConfigError(
                f"{path}: must be one of {', '.join(map(str, choices))}, got {_show(value)}"
            )
        return value
    if origin is dict:
        key_tp, value_tp = typing.get_args(tp)
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: expected a mapping, got {value!r}")
        return {
            _convert(f"{path}", key_tp, k): _convert(f"{path}.{k}", value_tp, v)
            for k, v in value.items()
        }
    if origin is tuple:
        (item_tp, _ellipsis) = typing.get_args(tp)
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{path}: expected a list, got {_show(value)}")
        return tuple(_convert(f"{path}[{i}]", item_tp, v) for i, v in enumerate(value))
    if tp is type(None):
        if value is not None:
            raise ConfigError(f"{path}: expected null, got {_show(value)}")
        return None
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{path}: expected true or false, got {_show(value)}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{path}: expected an integer, got {_show(value)}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{path}: expected a number, got {_show(value)}")
        if not math.isfinite(value):
            raise ConfigError(f"{path}: must be finite, got {_show(value)}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{path}: expected a string, got {_show(value)}")
        return value
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        problems: list[str] = []
        built = _build(path, tp, value, problems)
        if built is None:
            raise ConfigError(*problems)
        return built
    raise ConfigError(f"{path}: unsupported type {_type_name(tp)}")  # pragma: no cover


RENAMED: dict[str, str] = {"streaming.clause_chars": "max_sentence_chars"}
"""Old key path → its new name in the same section: still read (with a warning), so a
config written for an older release keeps working."""


def _build(prefix: str, cls: type[Any], data: Any, problems: list[str]) -> Any:
    """``cls`` from ``data``; each problem found is added to ``problems`` (every key is
    checked, so a file's mistakes are all reported at once) and None returned."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        problems.append(f"{prefix or '<top>'}: expected a mapping, got {_show(data)}")
        return None
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    before = len(problems)
    for key, value in data.items():
        path = f"{prefix}.{_key(key)}" if prefix else _key(key)
        try:
            key, path = _current_name(prefix, key, path, data)
            if key not in fields:
                raise ConfigError(f"{path}: unknown key{_close_match(key, fields)}")
            tp = hints[key]
            if dataclasses.is_dataclass(tp) and isinstance(tp, type):
                kwargs[key] = _build(path, tp, value, problems)
                continue
            kwargs[key] = _in_range(path, fields[key], _convert(path, tp, value))
        except ConfigError as exc:
            problems.append(str(exc))
    if len(problems) > before:
        return None
    try:
        return cls(**kwargs)
    except ConfigError as exc:  # a section's own check across its keys (__post_init__)
        problems.append(str(exc))
        return None


def _current_name(prefix: str, key: Any, path: str, data: dict[Any, Any]) -> tuple[Any, str]:
    """A renamed key read as its new name (with a warning)."""
    if path not in RENAMED:
        return key, path
    new = RENAMED[path]
    if new in data:
        raise ConfigError(f"{path}: an old name of {new}; give only {new}")
    log.warning("%s is now %s.%s (read as that)", path, prefix, new)
    return new, f"{prefix}.{new}"


def _close_match(key: Any, fields: dict[str, Any]) -> str:
    # A long key cannot be a typo of a field name (and difflib is quadratic).
    candidates = list(fields) if len(str(key)) <= _SHOW else []
    close = difflib.get_close_matches(str(key), candidates, n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def _in_range(path: str, f: dataclasses.Field[Any], value: Any) -> Any:
    lo, hi = f.metadata.get("range", (None, None))
    if isinstance(value, int | float) and not isinstance(value, bool):
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise ConfigError(f"{path}: {_show(value)} is out of range [{lo}, {hi}]")
    return value


_V1_KEYS = frozenset(f.name for f in dataclasses.fields(V1Config))


def _moved_sections(data: Any) -> Any:
    """A config written before ``server`` was split (v1's socket, the doors' limits): its
    ``server.*`` keys read where they live now, with a warning each."""
    if not isinstance(data, dict) or "server" not in data:
        return data
    old = data["server"]
    if not isinstance(old, dict):
        raise ConfigError(f"server: expected a mapping, got {_show(old)}")
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items() if k != "server"}
    for key, value in old.items():
        section = "v1" if key in _V1_KEYS else "limits"
        target = out.setdefault(section, {})
        if not isinstance(target, dict):
            raise ConfigError(f"{section}: expected a mapping")
        if key in target:
            raise ConfigError(f"server.{_key(key)}: also given as {section}.{_key(key)}")
        log.warning("server.%s is now %s.%s (read as that)", _key(key), section, _key(key))
        target[key] = value
    return out


Flags = Mapping[str, tuple[str, Any]]
"""Settings given on the command line, a layer over the file: key path (``http.listen``) →
(the flag that set it, its value as YAML would give it).  Applied each time the file is
read, at start and on every reload, so a reload compares like with like."""


def parse_config(data: Any, flags: Flags | None = None) -> Config:
    """Validate a mapping (as loaded from YAML), with ``flags`` over it, into a
    :class:`Config`; an error in a flag's value names the flag too."""
    problems: list[str] = []
    result: Config | None = _build("", Config, _with_flags(_moved_sections(data), flags), problems)
    if result is None:
        raise ConfigError(*(_name_flag(p, flags) for p in problems))
    return result


def _name_flag(problem: str, flags: Flags | None) -> str:
    for key, (flag, _value) in (flags or {}).items():
        if problem.startswith((f"{key}:", f"{key}[")):
            return f"{flag}: {problem}"
    return problem


def _with_flags(data: Any, flags: Flags | None) -> Any:
    """``data`` with each flag's key set (a mapping that is not one is left for
    :func:`_build` to refuse)."""
    if not flags:
        return data
    out = dict(data) if isinstance(data, dict) else ({} if data is None else data)
    if not isinstance(out, dict):
        return out
    for key, (_flag, value) in flags.items():
        section, name = key.split(".", 1)
        old = out.get(section)
        if old is None:
            old = {}
        if isinstance(old, dict):
            out[section] = {**old, name: value}
    return out


MAX_CONFIG_BYTES = 1 << 20
"""A config file larger than this is refused unread (a real one is a few kilobytes)."""
MAX_CONFIG_DEPTH = 32
"""Deepest nesting of mappings and lists accepted (the schema needs 3)."""
_SHOW = 60
"""Longest rendering of a config value inside an error message."""

# Quote a value without ever rendering more than a few elements or characters of it.
_repr = reprlib.Repr()
_repr.maxlevel = 2
_repr.maxlist = _repr.maxtuple = _repr.maxdict = _repr.maxset = 4
_repr.maxstring = _repr.maxother = _SHOW


def _show(value: Any) -> str:
    """``repr(value)`` bounded: at most :data:`_SHOW` characters, whatever ``value`` holds."""
    text = _repr.repr(value)
    return text if len(text) <= _SHOW else text[: _SHOW - 3] + "..."


def _key(key: Any) -> str:
    text = str(key) if isinstance(key, str | int | float | bool) or key is None else _show(key)
    return text if len(text) <= _SHOW else text[: _SHOW - 3] + "..."


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader without anchors or aliases, duplicate keys or deep nesting.

    Aliases let a few hundred bytes stand for gigabytes (the "billion laughs"); a config
    has no use for them.  Refused while composing, before anything is expanded."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        event: Any = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent):
            raise _StructureError(f"aliases (*{event.anchor:.40}) are not allowed", event)
        if getattr(event, "anchor", None) is not None:
            raise _StructureError(f"anchors (&{event.anchor:.40}) are not allowed", event)
        self._depth += 1
        try:
            if self._depth > MAX_CONFIG_DEPTH:
                raise _StructureError(f"nested deeper than {MAX_CONFIG_DEPTH} levels", event)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:  # unhashable: the base class reports it
                    continue
                if duplicate:
                    raise _StructureError(f"duplicate key {_key(key)}", key_node)
        mapping: dict[Any, Any] = super().construct_mapping(node, deep=deep)
        return mapping


class _StructureError(Exception):
    """What the strict loader refuses, with where."""

    def __init__(self, what: str, at: Any) -> None:
        mark = getattr(at, "start_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        super().__init__(what + where)


def parse_yaml(text: str, source: str = "<config>") -> Any:
    """``text`` as plain data, through the strict loader; :class:`ConfigError` if refused."""
    loader = None
    try:
        loader = _StrictLoader(text)  # reads the text: a NUL is refused here
        return loader.get_single_data()
    except _StructureError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {_yaml_problem(exc)}") from None
    except RecursionError:  # pragma: no cover - the depth cap comes first
        raise ConfigError(f"{source}: nested too deeply") from None
    finally:
        if loader is not None:
            loader.dispose()


def _bounded(text: str, limit: int = 400) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """PyYAML's complaint on one line, with where (its own text quotes the source over
    several lines)."""
    problem = getattr(exc, "problem", None)
    mark = getattr(exc, "problem_mark", None)
    if not isinstance(problem, str) or mark is None:
        return _bounded(" ".join(str(exc).split()))
    return _bounded(f"{problem} (line {mark.line + 1}, column {mark.column + 1})")


def read_regular_file(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """At most ``max_bytes + 1`` bytes of ``path``, which must be a regular file (or the
    null device: ``--config /dev/null`` is an empty config).

    Opened without blocking and checked before reading: a FIFO (whose open waits for a
    writer) or a device is refused at once instead of hanging a reload.  Raises OSError."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == os.stat(os.devnull).st_rdev:
            return b""
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        return f.read(max_bytes + 1)


def read_config_text(path: str | os.PathLike[str], max_bytes: int = MAX_CONFIG_BYTES) -> str:
    """The file's text: at most ``max_bytes`` (a config's :data:`MAX_CONFIG_BYTES`; the
    lexicon reads through here with its own), valid UTF-8.  Raises :class:`ConfigError`."""
    try:
        data = read_regular_file(path, max_bytes)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    if len(data) > max_bytes:
        raise ConfigError(f"{path}: larger than {max_bytes} bytes; refused unread")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            f"{path}: not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}, line {line})"
        ) from None


def load_config(path: str | os.PathLike[str] | None = None, flags: Flags | None = None) -> Config:
    """Read and validate a YAML file, with ``flags`` over it.  ``None``: the system file if
    present, else defaults.

    Blocking and, for a large file, slow (pure-Python YAML): the daemon calls it in an
    executor."""
    if path is None:
        if not DEFAULT_CONFIG_PATH.exists():
            return parse_config({}, flags)
        path = DEFAULT_CONFIG_PATH
    return parse_config(parse_yaml(read_config_text(path), str(path)), flags)


def flatten(cfg: Any, prefix: str = "") -> dict[str, Any]:
    """``{"limits.max_text_chars": 20000, ...}`` for diffing two configs."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            out.update(flatten(value, key + "."))
        else:
            out[key] = value
    return out
