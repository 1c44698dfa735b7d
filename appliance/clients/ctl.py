"""``ttsctl``: talk to a running ttsd from the shell, or (``--local``) to one this process
builds for the one command (:mod:`appliance.clients.local`).

``synth`` writes audio and nothing else where the audio goes: its status lines go to
stderr, so ``-o -`` (or ``-o /dev/stdout``) is a clean stream (:mod:`appliance.clients
.stdoutaudio`).  Piper's options are taken by their names and done as piper's CLI does
them (:mod:`appliance.clients.piperstyle`); README "Coming from Piper".  A reader of
stdout that goes away ends ttsctl quietly (status 141: :mod:`appliance.ops.pipes`).
"""

from __future__ import annotations

import argparse
import asyncio
import codecs
import concurrent.futures
import contextlib
import functools
import json
import os
import socket
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from appliance import __version__
from appliance.clients.client import (
    AsyncClient,
    AsyncTextStream,
    Client,
    Synthesis,
    TtsdError,
    collect,
)
from appliance.clients.local import LocalDaemon, LocalError
from appliance.clients.piperstyle import PiperStyle, each_line
from appliance.clients.stdoutaudio import StdoutAudio, status
from appliance.doors import captions
from appliance.doors.formats import FileOut
from appliance.ops.config import ConfigError, load_config
from appliance.ops.pipes import quiet_broken_pipe
from appliance.speech import VOLUME, Word, within

STDOUT = "-"
MAX_SENTENCE_SILENCE_S = 10.0
"""``--sentence-silence`` at most (an SSML break's own cap)."""
LENGTH_SCALES = (0.25, 2.0)
"""``--length-scale`` L is ``speed`` 1/L: the protocol's speeds 0.5–4."""


def _read_stdin() -> str:
    return sys.stdin.buffer.read().decode("utf-8", errors="replace")


def _print(obj: dict[str, Any]) -> None:
    # ensure_ascii=False: IPA and the text as sent stay readable ("tˈɛst", not "t\u02c8...").
    shown = {k: v for k, v in obj.items() if k not in ("id",)}
    print(json.dumps(shown, indent=2, default=str, ensure_ascii=False))


OUTPUT_FORMATS = {".wav": "wav", ".flac": "flac", ".mp3": "mp3", ".ogg": "opus", ".opus": "opus"}
"""``ttsctl synth -o`` by the name's extension (no extension: WAV)."""


class _Refused(Exception):
    """A command line ttsctl will not carry out; its message is the one line printed."""


def _output_format(path: str, raw: bool = False) -> str:
    """The format ``path`` asks for (``pcm`` with ``--raw``), checked before any synthesis:
    a name the format or the directory refuses used to cost the whole synthesis, then a
    traceback."""
    out = Path(path)
    suffix = out.suffix.lower()
    fmt = "pcm" if raw else OUTPUT_FORMATS.get(suffix or ".wav")
    if fmt is None:
        known = ", ".join(OUTPUT_FORMATS)
        raise _Refused(f"{path}: unknown audio extension {suffix!r} (use {known}, or --raw)")
    parent = out.parent
    if not parent.is_dir():
        raise _Refused(f"{path}: no such directory: {parent}")
    if out.is_dir():
        raise _Refused(f"{path}: is a directory")
    if not os.access(parent, os.W_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise _Refused(f"{path}: not writable")
    return fmt


def _write_audio(path: str, result: Synthesis, fmt: str) -> int:
    """WAV as before; FLAC, MP3, Ogg/Opus (and raw PCM) through the encoders the HTTP door
    uses, into the file itself (seekable): libsndfile writes the real lengths there (FLAC's
    total and MD5, MP3's Info tag), not a stream's "unknown".  Returns the file's sample
    rate (Opus takes only some: 22050 Hz is written at 24000)."""
    if fmt == "wav":
        result.write_wav(path)
        return result.sample_rate
    with open(path, "w+b") as f:
        out = FileOut(fmt, result.sample_rate, f)
        try:
            out.write(result.samples())
            out.finish()
        finally:
            out.close()
    return out.sample_rate


# ---------------------------------------------------------------- the command line


def _connection_options(p: argparse.ArgumentParser, default: Any) -> None:
    """Where the daemon is: before the command or after it (``ttsctl ping --socket S``).
    After it, an option left out must not undo one given before (``default`` SUPPRESS)."""
    p.add_argument(
        "--socket", default=default, help="daemon socket (default: $TTSD_SOCKET, per-user, /run)"
    )
    p.add_argument(
        "--local",
        action="store_true",
        default=default,
        help="no daemon: build ttsd in this process for this one command (loads the voices)",
    )
    p.add_argument(
        "--config",
        default=default,
        help="with --local: the config ttsd serve would read (default: /etc/ttsd/config.yaml"
        " if present)",
    )


def _speech_options(p: argparse.ArgumentParser) -> None:
    """What ``synth`` and ``say`` share, with piper's names beside ttsd's."""
    p.add_argument("text", nargs="?", help="the text, or - for standard input")
    p.add_argument(
        "-i",
        "--input-file",
        "--input_file",
        metavar="FILE",
        help="the text from FILE (- for standard input); synth: each line its own text, as"
        " piper reads it",
    )
    p.add_argument("--voice", help="a voice the daemon serves (piper's -m: ttsctl voices)")
    p.add_argument("-s", "--speaker", help="a speaker's name or number")
    pace = p.add_mutually_exclusive_group()
    pace.add_argument("--speed", type=float, help="0.5 to 4 (1: the voice's own)")
    pace.add_argument(
        "--length-scale",
        "--length_scale",
        type=float,
        help="piper's phoneme length, 0.25 to 2: speed 1/LENGTH_SCALE",
    )
    p.add_argument("--noise-scale", "--noise_scale", type=float, help="generator noise, 0 to 2")
    p.add_argument(
        "--noise-w",
        "--noise_w",
        "--noise-w-scale",
        "--noise_w_scale",
        type=float,
        help="phoneme width noise, 0 to 2",
    )
    p.add_argument("--deterministic", action="store_true", help="the same audio for the same text")
    p.add_argument("--volume", type=float, help="0 to 2 (1: as the voice speaks)")
    p.add_argument("--ssml", action="store_true", help="TEXT is SSML (docs/ssml.md)")
    p.add_argument("--markdown", action="store_true", help="TEXT is Markdown (docs/markdown.md)")
    p.add_argument(
        "--stream", action="store_true", help="with -: speak standard input as it arrives"
    )


def _synth_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-o",
        "-f",
        "--output",
        "--output-file",
        "--output_file",
        metavar="FILE",
        help="FILE.wav (default), .flac, .mp3, .ogg or .opus; - for standard output (WAV)",
    )
    p.add_argument(
        "--raw",
        "--output-raw",
        "--output_raw",
        action="store_true",
        help="bare s16le mono samples (the rate is said on stderr); without -o: to stdout",
    )
    p.add_argument("--sample-rate", type=int)
    p.add_argument("--mode", choices=["dialog", "reading", "sentence"])
    p.add_argument(
        "--normalize",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="each sentence's peak at full scale, as piper's CLI writes it (default: off, the"
        " voice's own level, as piper --no-normalize)",
    )
    p.add_argument(
        "--sentence-silence",
        "--sentence_silence",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help=f"silence between sentences (at most {MAX_SENTENCE_SILENCE_S:g})",
    )
    p.add_argument(
        "--subtitles",
        metavar="FILE",
        help="also write captions: FILE.vtt (WebVTT) or FILE.srt, a cue per sentence",
    )
    p.add_argument(
        "--cue-words", type=int, default=0, metavar="N", help="at most N words a cue (0: no limit)"
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ttsctl", description="Client for the ttsd daemon")
    parser.add_argument("--version", action="version", version=f"ttsctl {__version__}")
    _connection_options(parser, None)
    parser.set_defaults(local=False)
    after = argparse.ArgumentParser(add_help=False)
    _connection_options(after, argparse.SUPPRESS)
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser(
        "synth", parents=[after], help="synthesize TEXT (or -, or -i FILE) to a file or stdout"
    )
    _speech_options(p)
    _synth_options(p)
    p = sub.add_parser("say", parents=[after], help="speak TEXT (or -) on the daemon's speaker")
    _speech_options(p)
    p.add_argument(
        "--priority",
        choices=["important", "message", "text", "notification", "progress"],
        default="message",
    )
    p.add_argument("--wait", action="store_true", help="return when the speech has ended")
    p = sub.add_parser(
        "phonemes",
        parents=[after],
        help="print the phonemes the voice says for TEXT (or -), word by word",
    )
    p.add_argument("text")
    p.add_argument("--voice")
    p.add_argument("--ssml", action="store_true", help="TEXT is SSML")
    p.add_argument("--markdown", action="store_true", help="TEXT is Markdown")
    p.add_argument("--json", action="store_true", help="the daemon's whole answer as JSON")
    p = sub.add_parser(
        "voices", parents=[after], help="the voices the daemon serves (and files it skipped)"
    )
    p.add_argument("--json", action="store_true", help="one JSON object, for programs")
    for name in ("info", "stats", "health", "ping", "stop"):
        sub.add_parser(name, parents=[after])
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        return quiet_broken_pipe(functools.partial(_main, argv))
    except KeyboardInterrupt:
        return 130  # Ctrl-C: the user knows why; no traceback (the shell's status for it)


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        _check(args)
    except _Refused as exc:
        print(f"ttsctl: {exc}", file=sys.stderr)
        return 2
    try:
        with _daemon(args) as sock:
            if getattr(args, "stream", False):
                return asyncio.run(_stream_stdin(args, sock))
            with Client(args.socket, sock=sock) as client:
                return _dispatch(client, args)
    except (TtsdError, LocalError) as exc:
        print(f"ttsctl: {exc}", file=sys.stderr)
        return 1


def _dispatch(client: Client, args: argparse.Namespace) -> int:
    if args.cmd == "synth":
        return _synth(client, args)
    if args.cmd == "say":
        return _say(client, args)
    if args.cmd == "phonemes":
        return _phonemes(client, args)
    if args.cmd == "voices":
        return _voices(client.request("info"), args.json)
    if args.cmd == "ping":
        ok = client.ping()
        print("pong" if ok else "no answer")
        return 0 if ok else 1
    if args.cmd == "stop":
        client.request("stop")
        print("stopped: everything this user had queued or playing")
        return 0
    _print(client.request(args.cmd))
    return 0


@contextlib.contextmanager
def _daemon(args: argparse.Namespace) -> Iterator[socket.socket | None]:
    """With ``--local``, the in-process daemon's end of its connection; else None (the
    client connects to ``--socket``)."""
    if not args.local:
        yield None
        return
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        raise LocalError(f"config: {exc}") from None
    with LocalDaemon(cfg) as sock:
        yield sock


def _check(args: argparse.Namespace) -> None:
    """Everything a command line can be refused for, before any connection or synthesis."""
    if args.cmd == "synth":
        if args.output is None and not args.raw:
            raise _Refused("synth: give -o FILE (or -o - for standard output)")
        args.output = STDOUT if args.output is None or _is_stdout(args.output) else args.output
        if args.output == STDOUT and sys.stdout.isatty():
            raise _Refused("standard output is a terminal: pipe it (| aplay) or give -o FILE")
        args.format = None if args.output == STDOUT else _output_format(args.output, args.raw)
        args.captions = _subtitles_format(args)
        if not 0.0 <= args.sentence_silence <= MAX_SENTENCE_SILENCE_S:
            raise _Refused(f"--sentence-silence: 0 to {MAX_SENTENCE_SILENCE_S:g} seconds")
    if args.cmd in ("synth", "say"):
        args.opts = _request_opts(args)
        args.said = _input_text(args)


def _is_stdout(path: str) -> bool:
    """``-``, or a name of this process's standard output (/dev/stdout, /dev/fd/1): a pipe
    cannot take a file that is written whole and then patched."""
    if path == STDOUT:
        return True
    try:
        return os.path.samestat(os.stat(path), os.fstat(sys.stdout.fileno()))
    except (OSError, ValueError):  # ValueError: stdout closed or not a real file
        return False


def _input_text(args: argparse.Namespace) -> str:
    """TEXT, standard input (``-``) or ``-i FILE``; "" with ``--stream`` (read as it comes)."""
    if args.stream:
        if args.text != "-" or args.input_file is not None:
            raise _Refused("--stream reads standard input: give - as TEXT")
        return ""
    if (args.text is None) == (args.input_file is None):
        raise _Refused(f"{args.cmd}: give TEXT (- for standard input) or -i FILE")
    source = args.text if args.input_file is None else args.input_file
    if source == "-":
        return _read_stdin()
    if args.input_file is None:
        return str(args.text)
    try:
        return Path(source).read_text(encoding="utf-8")
    except OSError as exc:
        raise _Refused(f"{source}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise _Refused(f"{source}: not UTF-8 text") from None


def _request_opts(args: argparse.Namespace) -> dict[str, Any]:
    """The request's fields from ``synth`` / ``say``'s options (speak's own: ``_say``)."""
    opts: dict[str, Any] = {}
    for key in ("voice", "noise_scale", "noise_w", "speed", "mode", "sample_rate"):
        if getattr(args, key, None) is not None:
            opts[key] = getattr(args, key)
    if args.length_scale is not None:
        lo, hi = LENGTH_SCALES
        if not lo <= args.length_scale <= hi:
            raise _Refused(f"--length-scale: {lo:g} to {hi:g}")
        opts["speed"] = 1.0 / args.length_scale
    if args.speaker is not None:
        opts["speaker"] = int(args.speaker) if args.speaker.isdigit() else args.speaker
    if args.deterministic:
        opts["deterministic"] = True
    if args.volume is not None and not within("volume", args.volume):
        raise _Refused(f"--volume: {VOLUME[0]:g} to {VOLUME[1]:g}")
    if args.volume is not None and not getattr(args, "normalize", False):
        opts["volume"] = args.volume  # with --normalize: after it, here (PiperStyle)
    if args.ssml:
        opts["text_format"] = "ssml"
    if args.markdown:
        opts["text_format"] = "markdown"
    if args.cmd == "synth":
        opts["format"] = "f32le"  # written as s16le here exactly as the daemon would
        if args.captions:
            opts["word_timings"] = True
        if args.normalize or args.local:
            # Batch work, never a quick start: every sentence is piper's whole rendering.
            opts["realtime"] = False
    return opts


# ---------------------------------------------------------------- synth


def _synth(client: Client, args: argparse.Namespace) -> int:
    out = _SynthOutput(args)
    if args.input_file is None:
        events = client.synthesize(args.said, **args.opts)
    else:
        events = each_line(args.said, lambda line: client.synthesize(line, **args.opts))
    for ev in events:
        out.take(ev)
    return out.close()


class _SynthOutput:
    """Where ``synth``'s events go: through piper's touches (``--normalize``,
    ``--sentence-silence``), then to standard output as they come, or into the file at
    the end; captions beside either."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        volume = args.volume if args.normalize and args.volume is not None else 1.0
        self.style = PiperStyle(args.normalize, volume, args.sentence_silence)
        self.stdout = StdoutAudio(args.raw) if args.output == STDOUT else None
        self.events: list[dict[str, Any]] = []
        """For the file: every event; for stdout: the chunks' timings, for captions."""

    def take(self, ev: dict[str, Any]) -> None:
        for out in self.style.feed(ev):
            if self.stdout is None:
                self.events.append(out)
                continue
            self.stdout.take(out)
            if self.args.captions and out.get("event") == "chunk":
                self.events.append({k: v for k, v in out.items() if k != "audio"})

    def close(self) -> int:
        if self.stdout is not None:
            status = self.stdout.close()
        else:
            status = _report(self.args, collect(iter(self.events)))
        chunks = [ev for ev in self.events if ev.get("event") == "chunk"]
        return status or _write_subtitles(self.args, chunks, self.args.said)


def _report(args: argparse.Namespace, result: Synthesis) -> int:
    path = args.output
    try:
        rate = _write_audio(path, result, args.format)
    except (OSError, RuntimeError) as exc:  # RuntimeError: libsndfile's own errors
        print(
            f"ttsctl: {path}: cannot write: {getattr(exc, 'strerror', None) or exc}",
            file=sys.stderr,
        )
        return 1
    st = result.stats
    kind = "raw s16le mono, " if args.format == "pcm" else ""
    status(
        f"{path}: {kind}{round(result.duration_ms)} ms of audio at {rate} Hz,"
        f" first packet after {st.get('ttfp_ms')} ms"
    )
    return 0


def _subtitles_format(args: argparse.Namespace) -> str | None:
    """``--subtitles``' format by its extension, checked before any synthesis."""
    path = args.subtitles
    if path is None:
        return None
    if args.stream:
        raise _Refused("--subtitles needs the whole text: not with --stream")
    fmt = Path(path).suffix.lower().lstrip(".")
    if fmt not in captions.CAPTION_FORMATS:
        raise _Refused(f"{path}: subtitles are .vtt or .srt")
    if args.cue_words < 0:
        raise _Refused("--cue-words must be 0 or more")
    return fmt


def _write_subtitles(args: argparse.Namespace, chunks: list[dict[str, Any]], text: str) -> int:
    """Cues from the chunks' word timings (one per sentence, or ``--cue-words``)."""
    if args.captions is None:
        return 0
    text_format = "ssml" if args.ssml else "markdown" if args.markdown else "text"
    cues = captions.CueBuilder(text, args.cue_words, text_format)
    for chunk in chunks:
        words = [
            Word((int(w["text_span"][0]), int(w["text_span"][1])), w["offset_ms"], w["duration_ms"])
            for w in chunk.get("words", [])
        ]
        cues.add(words, bool(chunk.get("sentence_end")))
    try:
        Path(args.subtitles).write_text(captions.render(args.captions, cues.finish()), "utf-8")
    except OSError as exc:
        print(f"ttsctl: {args.subtitles}: cannot write: {exc.strerror or exc}", file=sys.stderr)
        return 1
    status(f"{args.subtitles}: {len(cues.cues)} cues")
    return 0


# ---------------------------------------------------------------- the other commands


def _phonemes(client: Client, args: argparse.Namespace) -> int:
    """One line per word: the word as the voice reads it (after normalisation and the
    lexicon) and its phonemes, ready to paste into a lexicon entry."""
    fields: dict[str, Any] = {"text": _read_stdin() if args.text == "-" else args.text}
    if args.voice:
        fields["voice"] = args.voice
    if args.ssml:
        fields["text_format"] = "ssml"
    if args.markdown:
        fields["text_format"] = "markdown"
    reply = client.request("phonemes", **fields)
    if args.json:
        _print(reply)
        return 0
    for clause in reply.get("clauses", []):
        for word in clause.get("words", []):
            print(f"{word.get('text')}\t{word.get('phonemes')}")
    return 0


VOICE_COLUMNS = ("name", "language", "rate", "speakers", "quality", "status")


def voice_rows(info: dict[str, Any]) -> list[dict[str, Any]]:
    """``ttsctl voices``: one row per voice the daemon serves, then one per file it skipped."""
    rows: list[dict[str, Any]] = []
    for v in info.get("voices") or ():
        speakers = list(v.get("speakers") or ())
        rows.append(
            {
                "name": v.get("name"),
                "language": v.get("language"),
                "rate": v.get("sample_rate"),
                "speakers": speakers,
                "quality": v.get("quality") or "",
                "status": ("loaded, streaming" if v.get("streaming") else "loaded, whole-sentence"),
                "default": v.get("name") == info.get("default_voice"),
            }
        )
    for s in info.get("voices_skipped") or ():
        file = str(s.get("file", ""))
        name = Path(file).name.removesuffix(".onnx")
        rows.append({"name": name, "language": "", "rate": "", "speakers": [], "quality": ""})
        rows[-1].update(status=f"skipped: {s.get('reason')}", file=file, default=False)
    return rows


def _speakers_cell(speakers: list[Any]) -> str:
    if not speakers:
        return "1"
    shown = ", ".join(str(s) for s in speakers[:3])
    return f"{len(speakers)} ({shown}{', …' if len(speakers) > 3 else ''})"


def _voices(info: dict[str, Any], as_json: bool) -> int:
    rows = voice_rows(info)
    if as_json:
        print(json.dumps({"voices": rows, "default": info.get("default_voice")}, indent=2))
        return 0
    cells = [
        [
            f"{r['name']}{' *' if r['default'] else ''}",
            str(r["language"]),
            str(r["rate"]),
            _speakers_cell(r["speakers"]) if r["rate"] else "",
            str(r["quality"]),
            str(r["status"]),
        ]
        for r in rows
    ]
    widths = [max(len(c[i]) for c in [list(VOICE_COLUMNS), *cells]) for i in range(6)]
    for line in [list(VOICE_COLUMNS), *cells]:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip())
    print("* default voice")
    return 0


async def _stream_stdin(args: argparse.Namespace, sock: socket.socket | None) -> int:
    """Send standard input as it arrives (``generator | ttsctl say --stream -``)."""
    loop = asyncio.get_running_loop()
    utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
    async with await AsyncClient.connect(args.socket, sock=sock) as client:
        if args.cmd == "synth":
            stream = await client.text_stream(**args.opts)
            out = _SynthOutput(args)
            async for ev in _feed_and_read(stream, loop, utf8):
                out.take(ev)
            return out.close()
        stream = await client.text_stream(op="speak", priority=args.priority, **args.opts)
        events = [ev async for ev in _feed_and_read(stream, loop, utf8)]
    end = events[-1] if events else {}
    print("cancelled" if end.get("cancelled") else "done")
    return 0


async def _feed_and_read(
    stream: AsyncTextStream, loop: asyncio.AbstractEventLoop, utf8: codecs.IncrementalDecoder
) -> AsyncIterator[dict[str, Any]]:
    # A daemon thread, not the executor: a blocked read of stdin must not keep the
    # process alive once the request has ended.
    chunks: asyncio.Queue[bytes] = asyncio.Queue(maxsize=64)

    def read_stdin() -> None:
        while True:
            data = os.read(sys.stdin.fileno(), 4096)
            put = chunks.put(data)
            try:
                asyncio.run_coroutine_threadsafe(put, loop).result()
            except (RuntimeError, concurrent.futures.CancelledError):
                put.close()  # the request ended, and its loop with it: nobody reads on
                return
            if not data:
                return

    async def feed() -> None:
        while True:
            data = await chunks.get()
            text = utf8.decode(data, final=not data)
            if text:
                await stream.append(text)
            if not data:
                await stream.finish()
                return

    threading.Thread(target=read_stdin, name="stdin", daemon=True).start()
    feeder = asyncio.create_task(feed())
    try:
        async for ev in stream:
            yield ev
    finally:
        feeder.cancel()


def _say(client: Client, args: argparse.Namespace) -> int:
    rid = client.next_id()
    msg = {"op": "speak", "id": rid, "text": args.said, "priority": args.priority, **args.opts}
    client.send(msg)
    for ev in client.events(rid):
        kind = ev.get("event")
        if kind == "queued" and not args.wait:
            print(f"queued at position {ev.get('position')}")
            return 0
        if kind == "started":
            print(f"speaking (first sound after {ev.get('latency_ms')} ms)")
        if kind == "end":
            print("cancelled" if ev.get("cancelled") else "done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
