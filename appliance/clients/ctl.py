"""``ttsctl``: talk to a running ttsd from the shell."""

from __future__ import annotations

import argparse
import asyncio
import codecs
import json
import os
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from appliance.clients.client import (
    AsyncClient,
    AsyncTextStream,
    Client,
    Synthesis,
    TtsdError,
    collect,
)
from appliance.doors import captions
from appliance.doors.formats import make_encoder
from appliance.speech import Word


def _text(arg: str) -> str:
    return sys.stdin.read() if arg == "-" else arg


def _print(obj: dict[str, Any]) -> None:
    # ensure_ascii=False: IPA and the text as sent stay readable ("tˈɛst", not "t\u02c8...").
    shown = {k: v for k, v in obj.items() if k not in ("id",)}
    print(json.dumps(shown, indent=2, default=str, ensure_ascii=False))


OUTPUT_FORMATS = {".wav": "wav", ".flac": "flac", ".mp3": "mp3", ".ogg": "opus", ".opus": "opus"}
"""``ttsctl synth -o`` by the name's extension (no extension: WAV)."""


class _Refused(Exception):
    """A command line ttsctl will not carry out; its message is the one line printed."""


def _output_format(path: str) -> str:
    """The format ``path`` asks for, checked before any synthesis: a name the format or the
    directory refuses used to cost the whole synthesis, then a traceback."""
    out = Path(path)
    suffix = out.suffix.lower()
    fmt = OUTPUT_FORMATS.get(suffix or ".wav")
    if fmt is None:
        known = ", ".join(OUTPUT_FORMATS)
        raise _Refused(f"{path}: unknown audio extension {suffix!r} (use {known})")
    parent = out.parent
    if not parent.is_dir():
        raise _Refused(f"{path}: no such directory: {parent}")
    if out.is_dir():
        raise _Refused(f"{path}: is a directory")
    if not os.access(parent, os.W_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise _Refused(f"{path}: not writable")
    return fmt


def _write_audio(path: str, result: Synthesis, fmt: str) -> None:
    """WAV as before; FLAC, MP3 and Ogg/Opus through the encoders the HTTP door uses."""
    if fmt == "wav":
        result.write_wav(path)
        return
    encoder = make_encoder(fmt, result.sample_rate)
    data = encoder.header() + encoder.encode(result.samples(), last=True) + encoder.finish()
    Path(path).write_bytes(data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ttsctl", description="Client for the ttsd daemon")
    parser.add_argument("--socket", help="daemon socket (default: $TTSD_SOCKET, per-user, /run)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("synth", help="synthesize TEXT (or - for stdin) to a WAV file")
    p.add_argument("text")
    p.add_argument(
        "-o", "--output", required=True, help="FILE.wav (default), .flac, .mp3, .ogg or .opus"
    )
    p.add_argument("--voice")
    p.add_argument("--speaker")
    p.add_argument("--speed", type=float)
    p.add_argument("--volume", type=float)
    p.add_argument("--sample-rate", type=int)
    p.add_argument("--mode", choices=["dialog", "reading", "sentence"])
    p.add_argument(
        "--stream", action="store_true", help="with -: speak standard input as it arrives"
    )
    p.add_argument("--ssml", action="store_true", help="TEXT is SSML (docs/ssml.md)")
    p.add_argument("--markdown", action="store_true", help="TEXT is Markdown (docs/markdown.md)")
    p.add_argument(
        "--subtitles",
        metavar="FILE",
        help="also write captions: FILE.vtt (WebVTT) or FILE.srt, a cue per sentence",
    )
    p.add_argument(
        "--cue-words", type=int, default=0, metavar="N", help="at most N words a cue (0: no limit)"
    )
    p = sub.add_parser("say", help="speak TEXT (or -) on the daemon's speaker")
    p.add_argument("text")
    p.add_argument("--ssml", action="store_true", help="TEXT is SSML (docs/ssml.md)")
    p.add_argument("--markdown", action="store_true", help="TEXT is Markdown (docs/markdown.md)")
    p.add_argument(
        "--stream", action="store_true", help="with -: speak standard input as it arrives"
    )
    p.add_argument(
        "--priority",
        choices=["important", "message", "text", "notification", "progress"],
        default="message",
    )
    p.add_argument("--voice")
    p.add_argument("--wait", action="store_true", help="return when the speech has ended")
    p = sub.add_parser(
        "phonemes", help="print the phonemes the voice says for TEXT (or -), word by word"
    )
    p.add_argument("text")
    p.add_argument("--voice")
    p.add_argument("--ssml", action="store_true", help="TEXT is SSML")
    p.add_argument("--markdown", action="store_true", help="TEXT is Markdown")
    p.add_argument("--json", action="store_true", help="the daemon's whole answer as JSON")
    p = sub.add_parser("voices", help="the voices the daemon serves (and files it skipped)")
    p.add_argument("--json", action="store_true", help="one JSON object, for programs")
    for name in ("info", "stats", "health", "ping", "stop"):
        sub.add_parser(name)
    args = parser.parse_args(argv)
    try:
        args.format = _output_format(args.output) if args.cmd == "synth" else None
        args.captions = _subtitles_format(args) if args.cmd == "synth" else None
    except _Refused as exc:
        print(f"ttsctl: {exc}", file=sys.stderr)
        return 2
    if getattr(args, "stream", False):
        if args.text != "-":
            parser.error("--stream reads standard input: give - as TEXT")
        try:
            return asyncio.run(_stream_stdin(args))
        except TtsdError as exc:
            print(f"ttsctl: {exc}", file=sys.stderr)
            return 1
    try:
        with Client(args.socket) as client:
            if args.cmd == "synth":
                text = _text(args.text)
                result = client.synthesize_all(text, **_synth_opts(args))
                return _report(args, result) or _write_subtitles(args, result, text)
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
    except TtsdError as exc:
        print(f"ttsctl: {exc}", file=sys.stderr)
        return 1


def _synth_opts(args: argparse.Namespace) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    for key in ("voice", "speed", "volume", "mode"):
        if getattr(args, key) is not None:
            opts[key] = getattr(args, key)
    if args.speaker is not None:
        opts["speaker"] = int(args.speaker) if args.speaker.isdigit() else args.speaker
    if args.sample_rate is not None:
        opts["sample_rate"] = args.sample_rate
    if getattr(args, "ssml", False):
        opts["text_format"] = "ssml"
    if getattr(args, "markdown", False):
        opts["text_format"] = "markdown"
    if getattr(args, "captions", None):
        opts["word_timings"] = True
    return opts


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


def _write_subtitles(args: argparse.Namespace, result: Synthesis, text: str) -> int:
    """Cues from the chunks' word timings (one per sentence, or ``--cue-words``)."""
    if args.captions is None:
        return 0
    cues = captions.CueBuilder(text, args.cue_words)
    for chunk in result.chunks:
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
    print(f"{args.subtitles}: {len(cues.cues)} cues")
    return 0


def _phonemes(client: Client, args: argparse.Namespace) -> int:
    """One line per word: the word as the voice reads it (after normalisation and the
    lexicon) and its phonemes, ready to paste into a lexicon entry."""
    fields: dict[str, Any] = {"text": _text(args.text)}
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


def _report(args: argparse.Namespace, result: Synthesis) -> int:
    path = args.output
    try:
        _write_audio(path, result, args.format)
    except (OSError, RuntimeError) as exc:  # RuntimeError: libsndfile's own errors
        print(
            f"ttsctl: {path}: cannot write: {getattr(exc, 'strerror', None) or exc}",
            file=sys.stderr,
        )
        return 1
    st = result.stats
    print(
        f"{path}: {st.get('audio_ms')} ms of audio at {result.sample_rate} Hz,"
        f" first packet after {st.get('ttfp_ms')} ms"
    )
    return 0


async def _stream_stdin(args: argparse.Namespace) -> int:
    """Send standard input as it arrives (``generator | ttsctl say --stream -``)."""
    loop = asyncio.get_running_loop()
    utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
    async with await AsyncClient.connect(args.socket) as client:
        if args.cmd == "synth":
            stream = await client.text_stream(**_synth_opts(args))
        else:
            opts: dict[str, Any] = {"priority": args.priority}
            if args.voice:
                opts["voice"] = args.voice
            if args.markdown:
                opts["text_format"] = "markdown"
            stream = await client.text_stream(op="speak", **opts)
        events = [ev async for ev in _feed_and_read(stream, loop, utf8)]
    if args.cmd == "synth":
        return _report(args, collect(iter(events)))
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
            asyncio.run_coroutine_threadsafe(chunks.put(data), loop).result()
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
    msg: dict[str, Any] = {
        "op": "speak",
        "id": rid,
        "text": _text(args.text),
        "priority": args.priority,
    }
    if args.voice:
        msg["voice"] = args.voice
    if args.ssml:
        msg["text_format"] = "ssml"
    if args.markdown:
        msg["text_format"] = "markdown"
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
