"""Text that streams in: a language model's tokens fed to ttsd at 20 and 50 tokens/s.

For each bench text, split into 3–5-character tokens (seeded; a sentence end closes its
token, as a language model's tokenizer writes it), the feed appends one token
every 1/rate s on one text-stream request and reads chunks as they come.  Reported:

- **release → first chunk**: from the append that completes the first segment (by the
  documented rule, :func:`appliance.text.cuts.stream.release_point`) to the first chunk read,
  beside the plain TTFP of that same segment sent as an ordinary request (same daemon,
  same run) after the daemon sat idle as long as the feed kept it waiting for the
  release: the streaming overhead is the difference.  (A request after ~1 s of idleness
  has its first packet 5–10 ms later than one right after another — cold caches, cores
  in a power state — so back-to-back plain requests would flatter the plain side.)
- **sentence end → first chunk** (issue 28): from the append of the token that carries the
  first sentence's final punctuation to the first chunk read — the figure a listener
  feels, whatever the rule; with a sentence end released as it arrives it is the plain
  TTFP plus the streaming overhead (the goal: within 15 ms of the plain TTFP at 20 /s).
- The ``markdown`` text is a language model's Markdown reply fed with
  ``text_format: markdown`` (its release rule:
  :func:`appliance.text.cuts.blocks.markdown_release_point`).
- **stalls** after the first chunk: a client playing from its first chunk with a 100 ms
  jitter buffer runs dry before a chunk arrives.
- **wyoming-piper's rule**: when the same feed would let wyoming-piper start its first
  sentence — it waits for the next sentence's first letter — from the same token timings
  (its synthesis time not even added).
"""

from __future__ import annotations

import asyncio
import random
import re
import statistics
import time
from typing import Any

from appliance.clients.client import AsyncClient
from appliance.text.cuts.blocks import markdown_release_point
from appliance.text.cuts.stream import Occasion, SegmentRule, release_point
from appliance.text.frontend import FrontendLimits, prepare

TEXTS = {
    "assistant": (
        "Sure! The train to Boston leaves at 3:30 pm from platform 9. Dr. Smith will meet "
        "you there, and the tickets cost $42.50 each. Have a good trip."
    ),
    "long": (
        "The committee met on a cold and windy morning to review the proposal for the new "
        "library building which would replace the old structure that had stood in the town "
        "square for more than one hundred years. Everyone agreed it was far too small."
    ),
}
MARKDOWN = {
    "markdown": (
        "**Sure!** Here are three options for dinner:\n\n"
        "1. **Pasta** with tomatoes and basil\n"
        "2. A *quick* stir-fry\n\n"
        "## Drinks\n\nWater is fine. Enjoy your meal!"
    )
}
RATES = (20.0, 50.0)
_JITTER_S = 0.1
_RULE = SegmentRule()


_END_THEN_SPACE = re.compile(r"[.!?][\"')*]*(?=\s)")


def tokens(text: str, seed: int = 7) -> list[str]:
    """3–5-character tokens, a sentence end closing its token ("there." then " How"), as a
    language model's tokenizer writes them (words carry their leading space)."""
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(text):
        n = rng.randint(3, 5)
        m = _END_THEN_SPACE.search(text, i, i + n)
        if m is not None and m.end() < i + n:
            n = m.end() - i
        out.append(text[i : i + n])
        i += n
    return out


def first_release(toks: list[str], markdown: bool = False) -> tuple[int, str]:
    """Index of the token whose append releases the first segment, and that segment."""
    rule = markdown_release_point if markdown else release_point
    text = ""
    for k, t in enumerate(toks):
        text += t
        n = rule(text, _RULE, Occasion(first=True))
        if n:
            return k, text[:n]
    return len(toks) - 1, text


def sentence_end_token(toks: list[str], fmt: str = "text") -> int:
    """Index of the token that carries the first sentence's final punctuation (the first
    sentence as the frontend reads the whole text: Markdown's "**Sure!**" ends at "!")."""
    text = "".join(toks)
    clauses = prepare(text, "en_US", FrontendLimits(20000, 400), text_format=fmt)
    end = next(c.span[1] for c in clauses if c.sentence_end)
    pos = 0
    for k, t in enumerate(toks):
        pos += len(t)
        if pos >= end:
            return k
    return len(toks) - 1


def whitespace_token(toks: list[str], k_end: int) -> int:
    """The token that brings the whitespace after token ``k_end``: where the rule before
    issue 28 (a sentence end waits for the whitespace after it) released the sentence."""
    for k in range(k_end + 1, len(toks)):
        if any(c.isspace() for c in toks[k]):
            return k
    return len(toks) - 1


def wyoming_piper_start(toks: list[str]) -> int:
    """Token index at which wyoming-piper's rule starts the first sentence: the first
    letter of the next sentence has arrived."""
    text = ""
    seen_end = False
    for k, t in enumerate(toks):
        for ch in t:
            text += ch
            if seen_end and ch.isalnum():
                return k
            if ch in ".!?" and not seen_end:
                seen_end = True
            elif seen_end and not (ch.isspace() or ch in ".!?\"')"):
                seen_end = False
    return len(toks) - 1


async def _feed(sock: str, toks: list[str], rate: float, fmt: str = "text") -> dict[str, Any]:
    async with await AsyncClient.connect(sock) as ac:
        # The release rule's figures: eager starts (the default since issue 44) have bench.eager.
        stream = await ac.text_stream(text_format=fmt, text_start="sentence")
        t_tok: list[float] = []

        async def feed() -> None:
            t0 = time.perf_counter()
            for k, tok in enumerate(toks):
                await asyncio.sleep(max(0.0, t0 + k / rate - time.perf_counter()))
                t_tok.append(time.perf_counter())
                await stream.append(tok)
            await stream.finish()

        feeder = asyncio.create_task(feed())
        arrivals: list[tuple[float, float]] = []  # (time read, audio seconds)
        async for ev in stream:
            if ev.get("event") == "chunk":
                arrivals.append((time.perf_counter(), float(ev["duration_ms"]) / 1000.0))
        await feeder
    stalls = 0
    if arrivals:
        t_first, played = arrivals[0][0], 0.0
        for t, dur in arrivals:
            if t > t_first + played + _JITTER_S:
                stalls += 1
                t_first = t - played  # playback resumes when the chunk arrives
            played += dur
    return {"t_tok": t_tok, "arrivals": arrivals, "stalls": stalls}


async def _plain_ttfp(sock: str, text: str, runs: int, idle_s: float, fmt: str = "text") -> float:
    """Median TTFP of ``text`` as an ordinary request, each after ``idle_s`` of quiet."""
    async with await AsyncClient.connect(sock) as ac:
        samples = []
        for _ in range(runs):
            await asyncio.sleep(idle_s)
            t0 = time.perf_counter()
            first = None
            async for ev in ac.synthesize(text, text_format=fmt):
                if ev.get("event") == "chunk" and first is None:
                    first = time.perf_counter() - t0
            assert first is not None
            samples.append(first)
        return statistics.median(samples) * 1000.0


def run(sock: str, runs: int = 3) -> list[dict[str, Any]]:
    rows = []
    for name, text in {**TEXTS, **MARKDOWN}.items():
        fmt = "markdown" if name in MARKDOWN else "text"
        toks = tokens(text)
        k_rel, segment = first_release(toks, markdown=fmt == "markdown")
        k_end = sentence_end_token(toks, fmt)
        k_ws = whitespace_token(toks, k_end)
        k_wp = wyoming_piper_start(toks)
        for rate in RATES:
            # The feed keeps the daemon idle for k_rel tokens before the release.
            plain = asyncio.run(_plain_ttfp(sock, segment, runs + 1, k_rel / rate, fmt))
            lat, end_lat, stalls, ours_start, wp_start, ws_wait = [], [], 0, [], [], []
            for _ in range(runs):
                r = asyncio.run(_feed(sock, toks, rate, fmt))
                t0 = r["t_tok"][0]
                first = r["arrivals"][0][0]
                lat.append((first - r["t_tok"][k_rel]) * 1000.0)
                end_lat.append((first - r["t_tok"][k_end]) * 1000.0)
                ws_wait.append((r["t_tok"][k_ws] - r["t_tok"][k_end]) * 1000.0)
                stalls += r["stalls"]
                ours_start.append((first - t0) * 1000.0)
                wp_start.append((r["t_tok"][k_wp] - t0) * 1000.0)
            rows.append(
                {
                    "text": name,
                    "rate": rate,
                    "tokens": len(toks),
                    "segment_chars": len(segment),
                    "release_to_first_chunk_ms": statistics.median(lat),
                    "sentence_end_to_first_chunk_ms": statistics.median(end_lat),
                    "sentence_end_token": k_end,
                    "whitespace_wait_ms": statistics.median(ws_wait),
                    "release_token": k_rel,
                    "plain_ttfp_ms": plain,
                    "overhead_ms": statistics.median(lat) - plain,
                    "stalls": stalls,
                    "runs": runs,
                    "ttsd_first_audio_ms": statistics.median(ours_start),
                    "wyoming_piper_rule_start_ms": statistics.median(wp_start),
                }
            )
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| text | tokens/s | first segment | release → first chunk P50 "
        "| sentence end → first chunk P50 | plain TTFP of it (same idle gap) "
        "| overhead | waiting for the whitespace would add "
        "| stalls | ttsd first audio (from first token) "
        "| wyoming-piper's rule would start at |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['text']} | {r['rate']:.0f} | {r['segment_chars']} chars "
            f"| {r['release_to_first_chunk_ms']:.1f} ms "
            f"| {r['sentence_end_to_first_chunk_ms']:.1f} ms | {r['plain_ttfp_ms']:.1f} ms "
            f"| {r['overhead_ms']:+.1f} ms | {r['whitespace_wait_ms']:.0f} ms "
            f"| {r['stalls']} / {r['runs']} runs "
            f"| {r['ttsd_first_audio_ms']:.0f} ms | {r['wyoming_piper_rule_start_ms']:.0f} ms "
            "(+ its synthesis) |"
        )
    return "\n".join(lines)
