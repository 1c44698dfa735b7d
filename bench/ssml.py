"""What SSML costs the first packet: parsing, and the whole SSML frontend over plain text.

Per sentence, on the same sentences: ``ssml.parse`` alone, and ``prepare(text_format="ssml")``
minus ``prepare`` of the plain text (the extra the SSML path adds before the first
encode).  Documents are shaped like what clients send: speech-dispatcher's marks before every
sentence, and a marked-up document with breaks, prosody, say-as and sub.  Goal: ≤ 1 ms a
sentence (issue 16).
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from typing import Any
from xml.sax.saxutils import escape

from appliance.text import ssml
from appliance.text.frontend import FrontendLimits, prepare
from bench.normalize import TYPICAL_SENTENCES

LIMITS = FrontendLimits(max_chars=20000, sentence_chars=400)


def speechd_document(sentences: list[str]) -> str:
    """speech-dispatcher's shape: ``<speak>`` with a mark before each sentence."""
    body = "".join(f'<mark name="{k}"/>{escape(s)} ' for k, s in enumerate(sentences))
    return f"<speak>{body}</speak>"


def rich_document(sentences: list[str]) -> str:
    """Every sentence in ``<s>``, with a break, a prosody span and a say-as between them."""
    parts = []
    for k, s in enumerate(sentences):
        parts.append(
            f'<s><mark name="{k}"/><prosody rate="{90 + k % 3 * 10}%">{escape(s)}</prosody></s>'
            f'<break time="{100 + k}ms"/><say-as interpret-as="digits">{k}</say-as>'
        )
    return "<speak><p>" + "".join(parts) + "</p></speak>"


def _time(fn: Callable[[], Any], repeat: int) -> list[float]:
    fn()  # lazy setup (regexes, num2words) is not what a request pays
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def bench_ssml(repeat: int = 50) -> dict[str, float]:
    sentences = list(TYPICAL_SENTENCES)
    n = len(sentences)
    plain = " ".join(sentences)
    speechd = speechd_document(sentences)
    rich = rich_document(sentences)
    t_plain = statistics.median(_time(lambda: prepare(plain, "en_US", LIMITS), repeat))
    result: dict[str, float] = {"sentences": float(n), "plain_prepare_ms_per_sentence": t_plain / n}
    for name, doc in (("speechd", speechd), ("rich", rich)):
        t_parse = statistics.median(_time(functools.partial(ssml.parse, doc, 20000), repeat))
        t_prep = statistics.median(
            _time(functools.partial(prepare, doc, "en_US", LIMITS, text_format="ssml"), repeat)
        )
        result[f"{name}_parse_ms_per_sentence"] = t_parse / n
        result[f"{name}_extra_ms_per_sentence"] = (t_prep - t_plain) / n
    return result


def format_table(r: dict[str, float]) -> str:
    rows = ["| document | parse / sentence | SSML frontend extra / sentence |", "|---|---|---|"]
    for name in ("speechd", "rich"):
        rows.append(
            f"| {name} | {r[f'{name}_parse_ms_per_sentence']:.3f} ms "
            f"| {r[f'{name}_extra_ms_per_sentence']:.3f} ms |"
        )
    rows.append(
        f"\nPlain-text frontend for reference: {r['plain_prepare_ms_per_sentence']:.3f} ms a "
        f"sentence ({int(r['sentences'])} sentences, median of runs)."
    )
    return "\n".join(rows)


if __name__ == "__main__":
    print(format_table(bench_ssml()))
