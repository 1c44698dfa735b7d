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
from appliance.core.chunkplan import mode_plan, plan_chunks
from appliance.model.engine.base import Scales
from appliance.text.frontend import Clause, FrontendLimits, prepare
from appliance.text.phonemize import Phonemizer
from bench.rig import bundled_model, start_daemon

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


_LIMITS = FrontendLimits(max_chars=20000, sentence_chars=400)


class _FirstClauses:
    """First clauses as a stream has them: ids, and the id position its first chunk's
    words start before (``SynthesisJob._first_chunk_ids``: the dialog plan's first chunk,
    from the bundled voice's own durations, noise off; a quick start's join is in the same
    window)."""

    def __init__(self) -> None:
        self.model, voice = bundled_model()
        self.info = voice.info
        self.phonemizer = Phonemizer(voice.info)
        self._plan = mode_plan("dialog", 1000 * voice.info.hop_length / voice.info.sample_rate)

    def first(self, text: str) -> tuple[Clause, Any, int]:
        clause = prepare(text, "en_US", _LIMITS)[0]
        ph = self.phonemizer
        ids = ph.ids(clause.text)
        scales = Scales(0.0, self.info.length_scale, 0.0)
        durations = self.model.encode_prior(ids, scales, None).durations
        boundary = [ph.is_boundary(int(i)) for i in ids]
        chunks, _ = plan_chunks(durations, boundary, self._plan, self._plan.first_target, True)
        before = np.concatenate([[0.0], np.cumsum(durations, dtype=np.float64)])
        return clause, ids, int(np.searchsorted(before, chunks[0][1] + 1))


def _work(ph: Phonemizer, clause: Clause, ids: Any) -> wordtimes.WordWork:
    """A clause's word work, as the stream starts it (``SynthesisJob._word_work``)."""
    return wordtimes.WordWork.of(clause.text, clause.word_spans, ids, ph.kinds, ph.word_size)


def _timed(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1000


def compute_cost(texts: dict[str, str], repeat: int = 200) -> dict[str, float]:
    """Per first clause: ms of the word work its first packet waits for (the words its
    first chunk needs, :meth:`WordWork.before`, and their times) and of the rest (found
    with the next chunk), warm (the word-size cache holds the words, as in a daemon that
    has spoken them before) and cold (words it has not: where espeak ran words together,
    each token is phonemized alone once)."""
    firsts = _FirstClauses()
    out: dict[str, float] = {}
    for name, text in texts.items():
        clause, ids, position = firsts.first(text)
        cum = np.cumsum(np.full(len(ids) + 1, 3.0)).tolist()

        def at(p: int, _: bool, cum: list[float] = cum) -> float:
            return cum[p] * 11.6

        times: dict[str, list[float]] = {"": [], "_rest": [], "_cold": []}
        _work(firsts.phonemizer, clause, ids).all()  # the warm case's words, sized
        for k in range(repeat):
            cold = k % 5 == 0
            ph = Phonemizer(firsts.info) if cold else firsts.phonemizer
            t0 = time.perf_counter()
            work = _work(ph, clause, ids)
            words = work.before(position)
            wordtimes.timed_words(words, at)
            t1 = time.perf_counter()
            wordtimes.timed_words(work.all()[len(words) :], at)
            times["_cold" if cold else ""].append(t1 - t0)
            if not cold:
                times["_rest"].append(time.perf_counter() - t1)
        for key, seconds in times.items():
            out[f"{name}{key}_ms"] = _timed(seconds)
    return out


def prose_cost(sentences: list[str]) -> dict[str, float]:
    """The word work each sentence's first packet waits for, with no word sized yet (a
    phonemizer of its own): what a reply of new words costs."""
    firsts = _FirstClauses()
    times = []
    for text in sentences:
        clause, ids, position = firsts.first(text)
        fresh = Phonemizer(firsts.info)
        t0 = time.perf_counter()
        _work(fresh, clause, ids).before(position)
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
        "| first packet's word work ms (in-process, warm) | cold (words not sized yet) "
        "| the rest, with the next chunk (warm) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, row in r["socket"].items():
        work, cold, rest = (
            r["compute"].get(f"{name}{key}_ms", float("nan")) for key in ("", "_cold", "_rest")
        )
        print(
            f"| {name} | {row['off_p50']:.2f} | {row['on_p50']:.2f} | {row['delta_p50']:+.2f} "
            f"| {row['paired_p50']:+.2f} ({row['pairs']}) | {work:.3f} | {cold:.3f} "
            f"| {rest:.3f} |"
        )
    c = r.get("prose")
    if c:
        print(
            f"\nWord work a first packet waits for, words not met yet ({c['sentences']} sentences "
            f"of the docs, in-process): P50 {c['p50_ms']:.3f} ms, P90 {c['p90_ms']:.3f} ms, "
            f"max {c['max_ms']:.3f} ms (goal ≤ +0.5 ms)"
        )
