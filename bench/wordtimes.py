"""What word timings cost the first packet (issue 29; goal: +0.5 ms or less).

Two measures on the same texts as the core table: the first packet over the socket with
``word_timings`` off and on (requests interleaved, each first in turn, so both see the same
machine), and the work itself in-process — the written words of the first clause (espeak
word gaps, the alignment, spans) and their times — which the socket figure hides in its
jitter (on a loaded machine, whether a long sentence gets a quick start moves its first
packet by far more than the words cost).  And the cold case over prose: the word work of
sentences whose words were not met yet (where espeak's count of words differs from the
text's, each token is then phonemized alone to size it, ~20 µs each).
"""

from __future__ import annotations

import re
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from appliance.core import wordtimes
from appliance.text.frontend import Clause, FrontendLimits, prepare
from appliance.text.phonemize import Phonemizer
from bench.rig import start_daemon

_MARKUP = re.compile(r"[/_=<>{}*`|\[\]#]")


def _first_packet(client: Any, rid: int, text: str, timed: bool) -> tuple[float, bool]:
    """The first packet's ms at the client, and whether the request had a quick start."""
    t0 = time.perf_counter()
    req: dict[str, Any] = {"op": "synthesize", "id": rid, "text": text}
    if timed:
        req["word_timings"] = True
    client.send(req)
    first: float | None = None
    while True:
        ev = client.recv()
        if ev.get("event") == "chunk" and first is None:
            first = (time.perf_counter() - t0) * 1000
        elif ev.get("event") in ("end", "error"):
            if ev["event"] == "error" or first is None:
                raise RuntimeError(str(ev))
            return first, bool(ev.get("stats", {}).get("quick_start"))


def socket_cost(path: str, texts: dict[str, str], runs: int) -> dict[str, dict[str, float]]:
    from appliance.clients.client import Client

    client = Client(path)
    out: dict[str, dict[str, float]] = {}
    rid = 0
    for name, text in texts.items():
        off: list[float] = []
        on: list[float] = []
        paired: list[float] = []
        for i in range(runs + 2):
            # Alternate which goes first, so neither always follows the other.
            got: dict[bool, tuple[float, bool]] = {}
            for timed in (False, True) if i % 2 else (True, False):
                rid += 1
                got[timed] = _first_packet(client, rid, text, timed)
            if i < 2:  # warm-up
                continue
            off.append(got[False][0])
            on.append(got[True][0])
            # Whether a long sentence gets a quick start moves its first packet by tens of
            # ms, far more than the words cost: a pair counts where both took the same path.
            if got[False][1] == got[True][1]:
                paired.append(got[True][0] - got[False][0])
        out[name] = {
            "off_p50": statistics.median(off),
            "on_p50": statistics.median(on),
            "delta_p50": statistics.median(on) - statistics.median(off),
            "paired_p50": statistics.median(paired) if paired else float("nan"),
            "pairs": len(paired),
        }
    client.close()
    return out


def new_sentences(root: Path, count: int) -> list[str]:
    """Prose sentences of this project's own docs (100–300 characters, no code or markup),
    each once: their words are new to a fresh daemon, as a model's reply's would be."""
    out: list[str] = []
    for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        for para in doc.read_text(encoding="utf-8").split("\n\n"):
            if para.lstrip().startswith(("|", "#", "`", ">")):
                continue
            for s in re.split(r"(?<=[a-z][.!?])\s+", " ".join(para.split())):
                if 100 <= len(s) <= 300 and not _MARKUP.search(s) and s not in out:
                    out.append(s)
    return out[:count]


def _phonemizer() -> Phonemizer:
    from appliance.model.voices import bundled_voice_path
    from appliance.model.voices.load import read_info

    return Phonemizer(read_info("en_US-joe-medium", bundled_voice_path()))


_LIMITS = FrontendLimits(max_chars=20000, sentence_chars=400)


def _first_clause(ph: Phonemizer, text: str) -> tuple[Clause, Any]:
    """A text's first clause, as the frontend makes it, and its ids."""
    clause = prepare(text, "en_US", _LIMITS)[0]
    return clause, ph.ids(clause.text)


def _written(ph: Phonemizer, clause: Clause, ids: Any) -> list[wordtimes.WrittenWord]:
    """The word work of a clause, as the stream does it (``SynthesisJob._written``)."""
    spoken = wordtimes.spoken_words(ids, ph.kinds)
    return wordtimes.written_words(
        clause.text, clause.word_spans, ids, spoken, ph.kinds, ph.word_size
    )


def compute_cost(texts: dict[str, str], repeat: int = 200) -> dict[str, float]:
    """Per first clause: ms of the word work the stream adds, warm (the word-size cache
    holds the words, as it does in a daemon that has spoken them before) and cold (words
    it has not: where espeak ran words together, each token is phonemized alone once)."""
    ph = _phonemizer()
    out: dict[str, float] = {}
    for name, text in texts.items():
        clause, ids = _first_clause(ph, text)
        cum = np.cumsum(np.full(len(ids) + 1, 3.0))

        def work(
            ph: Phonemizer = ph, ids: Any = ids, clause: Clause = clause, cum: Any = cum
        ) -> None:
            words = _written(ph, clause, ids)
            wordtimes.timed_words(words, lambda p, _: float(cum[p]) * 11.6)

        work()
        times, cold = [], []
        for k in range(repeat):
            t0 = time.perf_counter()
            work()
            times.append((time.perf_counter() - t0) * 1000)
            if k % 5 == 0:  # a phonemizer that has sized no word yet
                fresh = Phonemizer(ph.info)
                t0 = time.perf_counter()
                work(fresh)
                cold.append((time.perf_counter() - t0) * 1000)
        out[f"{name}_ms"] = statistics.median(times)
        out[f"{name}_cold_ms"] = statistics.median(cold)
    return out


def prose_cost(sentences: list[str]) -> dict[str, float]:
    """The word work of each sentence's first clause with no word sized yet (a phonemizer
    of its own): what a reply of new words costs its first packet."""
    ph = _phonemizer()
    times = []
    for text in sentences:
        clause, ids = _first_clause(ph, text)
        fresh = Phonemizer(ph.info)
        t0 = time.perf_counter()
        _written(fresh, clause, ids)
        times.append((time.perf_counter() - t0) * 1000)
    times.sort()
    return {
        "sentences": len(times),
        "p50_ms": statistics.median(times),
        "p90_ms": times[int(0.9 * (len(times) - 1))],
        "max_ms": times[-1],
    }


def bench_wordtimes(out: Path, runs: int, texts: dict[str, str]) -> dict[str, Any]:
    proc, sock = start_daemon(out)
    try:
        result: dict[str, Any] = {"socket": socket_cost(sock, texts, runs)}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    result["compute"] = compute_cost(texts)
    result["prose"] = prose_cost(new_sentences(Path(__file__).resolve().parents[1], 200))
    return result


def print_wordtimes(r: dict[str, Any]) -> None:
    print("\n## Word timings: first packet cost (goal ≤ +0.5 ms)\n")
    print(
        "| text | off P50 ms | on P50 ms | Δ of P50s | Δ P50, paired (same path: pairs) "
        "| word work ms (in-process, warm) | cold (words not sized yet) |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, row in r["socket"].items():
        work = r["compute"].get(f"{name}_ms", float("nan"))
        cold = r["compute"].get(f"{name}_cold_ms", float("nan"))
        print(
            f"| {name} | {row['off_p50']:.2f} | {row['on_p50']:.2f} | {row['delta_p50']:+.2f} "
            f"| {row['paired_p50']:+.2f} ({row['pairs']}) | {work:.3f} | {cold:.3f} |"
        )
    c = r.get("prose")
    if c:
        print(
            f"\nWord work of a first clause of words not met yet ({c['sentences']} sentences "
            f"of the docs, in-process): P50 {c['p50_ms']:.3f} ms, P90 {c['p90_ms']:.3f} ms, "
            f"max {c['max_ms']:.3f} ms (goal ≤ +0.5 ms)"
        )
