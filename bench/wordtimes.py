"""What word timings cost the first packet (issue 29; goal: +0.5 ms or less).

The measure of the goal is the daemon's own: each request with ``word_timings`` reports
the word work its first packet waited for (``end``'s ``ttfp_parts_ms.words``: finding the
first chunk's words on its work item, and placing them on the event loop), over the socket
on the same texts as the core table, and on prose of these docs whose words the daemon has
not met (each token espeak ran together with another is then phonemized alone to size it).
Beside it, the first packet with ``word_timings`` off and on, in pairs (requests
interleaved, each first in turn; each cancelled at its first chunk, so a pair costs two
first packets), at the client and by the daemon's ttfp: those figures move by more than the
goal between runs (the model's runs vary by milliseconds; whether a long sentence gets a
quick start moves it by tens).  And the word work in-process, warm (words sized) and cold.
"""

from __future__ import annotations

import re
import statistics
import time
from dataclasses import dataclass
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


@dataclass
class _First:
    """One request's first packet: ms at the client, the daemon's own ttfp, whether it had a
    quick start, and the word work it waited for (the daemon's ``ttfp_parts_ms.words``)."""

    client_ms: float
    daemon_ms: float
    quick: bool
    words_ms: float | None


_SETTLE_S = 0.1
"""After a cancelled request: its work item still running ends before the next request."""


def _first_packet(
    client: Any, text: str, timed: bool, field: str = "word_timings", part: str = "words"
) -> _First:
    """Ask for ``text`` and cancel it at its first chunk: only the first packet is measured,
    so a long sentence's pair costs its first packets, not its 16 s of audio (``timed``:
    with ``field`` on; ``part``: its ``ttfp_parts_ms`` entry)."""
    rid = client.next_id()
    req: dict[str, Any] = {"op": "synthesize", "id": rid, "text": text}
    if timed:
        req[field] = True
    t0 = time.perf_counter()
    client.send(req)
    first: float | None = None
    while True:
        ev = client.recv()
        if ev.get("id") != rid:
            continue  # the cancel's own reply
        if ev.get("event") == "chunk" and first is None:
            first = (time.perf_counter() - t0) * 1000
            client.send({"op": "cancel", "id": client.next_id(), "target": rid})
        elif ev.get("event") in ("end", "error"):
            stats = ev.get("stats") or {}
            if ev["event"] == "error" or first is None or stats.get("ttfp_ms") is None:
                raise RuntimeError(str(ev))
            words = stats["ttfp_parts_ms"].get(part)
            time.sleep(_SETTLE_S)
            return _First(first, stats["ttfp_ms"], bool(stats.get("quick_start")), words)


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))] if ordered else float("nan")


def socket_cost(
    path: str, texts: dict[str, str], runs: int, field: str = "word_timings", part: str = "words"
) -> dict[str, dict[str, float]]:
    """Per text, ``runs`` pairs of requests without and with word timings (or another
    ``field``: visemes; which goes first alternates, so both see the same machine), and
    what the daemon says the words (its ``part``) cost."""
    from appliance.clients.client import Client

    client = Client(path)
    out: dict[str, dict[str, float]] = {}
    for name, text in texts.items():
        off: list[float] = []
        on: list[float] = []
        paired: list[float] = []
        paired_daemon: list[float] = []
        words: list[float] = []
        for i in range(runs + 2):
            order = (False, True) if i % 2 else (True, False)
            got = {timed: _first_packet(client, text, timed, field, part) for timed in order}
            if i < 2:  # warm-up
                continue
            plain, timed = got[False], got[True]
            off.append(plain.client_ms)
            on.append(timed.client_ms)
            if timed.words_ms is not None:
                words.append(timed.words_ms)
            # Whether a long sentence gets a quick start moves its first packet by tens of
            # ms, far more than the words cost: a pair counts where both took the same path.
            if plain.quick == timed.quick:
                paired.append(timed.client_ms - plain.client_ms)
                paired_daemon.append(timed.daemon_ms - plain.daemon_ms)
        out[name] = {
            "off_p50": statistics.median(off),
            "on_p50": statistics.median(on),
            "delta_p50": statistics.median(on) - statistics.median(off),
            "paired_p50": statistics.median(paired) if paired else float("nan"),
            "paired_daemon_p50": statistics.median(paired_daemon) if paired else float("nan"),
            "pairs": len(paired),
            "words_p50": statistics.median(words) if words else float("nan"),
            "words_p90": _p(words, 0.9),
            "words_max": max(words, default=float("nan")),
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
    words start before (``pipeline.encode.first_chunk_ids``: the dialog plan's first chunk,
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
    """A clause's word work, as the stream starts it (``pipeline.encode.word_work``)."""
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
    return _summary(times)


def _summary(times: list[float]) -> dict[str, float]:
    return {
        "sentences": len(times),
        "p50_ms": statistics.median(times),
        "p90_ms": _p(times, 0.9),
        "max_ms": max(times),
    }


def prose_daemon(path: str, sentences: list[str]) -> dict[str, float]:
    """The daemon's word work for each sentence's first packet, the first time it meets it."""
    from appliance.clients.client import Client

    client = Client(path)
    words = [_first_packet(client, text, True).words_ms for text in sentences]
    client.close()
    return _summary([w for w in words if w is not None])


def bench_wordtimes(out: Path, runs: int, texts: dict[str, str]) -> dict[str, Any]:
    prose = new_sentences(Path(__file__).resolve().parents[1], 200)
    proc, sock = start_daemon(out)
    try:
        result: dict[str, Any] = {"socket": socket_cost(sock, texts, runs)}
        result["prose_daemon"] = prose_daemon(sock, prose)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    result["compute"] = compute_cost(texts)
    result["prose"] = prose_cost(prose)
    return result


def print_wordtimes(r: dict[str, Any]) -> None:
    print("\n## Word timings: first packet cost (goal ≤ +0.5 ms)\n")
    print(
        "| text | off P50 ms | on P50 ms | Δ P50, paired at the client (pairs) "
        "| Δ P50, paired, daemon's ttfp | **word work the first packet waited for, daemon "
        "(P50 / P90 / max)** | in-process: warm | cold | the rest (warm) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, row in r["socket"].items():
        work, cold, rest = (
            r["compute"].get(f"{name}{key}_ms", float("nan")) for key in ("", "_cold", "_rest")
        )
        print(
            f"| {name} | {row['off_p50']:.2f} | {row['on_p50']:.2f} "
            f"| {row['paired_p50']:+.2f} ({row['pairs']}) | {row['paired_daemon_p50']:+.2f} "
            f"| **{row['words_p50']:.3f}** / {row['words_p90']:.3f} / {row['words_max']:.3f} "
            f"| {work:.3f} | {cold:.3f} | {rest:.3f} |"
        )
    print(
        "\n(The daemon times the word work on the first packet's work item and the placing of "
        "its words on the event loop: `end`'s `ttfp_parts_ms.words`. The paired socket "
        "figures move by more than the goal between runs: the model's runs vary by ms.)"
    )
    d = r.get("prose_daemon")
    if d:
        print(
            f"\n**Word work a first packet waited for, words not met yet** ({d['sentences']} "
            f"sentences of the docs, each new to the daemon): P50 {d['p50_ms']:.3f} ms, "
            f"P90 {d['p90_ms']:.3f} ms, max {d['max_ms']:.3f} ms (goal ≤ +0.5 ms)"
        )
    c = r.get("prose")
    if c:
        print(
            f"The same in-process, a phonemizer of its own for each ({c['sentences']} "
            f"sentences): P50 {c['p50_ms']:.3f} ms, P90 {c['p90_ms']:.3f} ms, "
            f"max {c['max_ms']:.3f} ms"
        )
