"""Markdown parsing cost (issue 28): a 2 kB language-model reply, and hostile sources.

Reported, in one process on the frontend's own functions (what each request runs in the
frontend executor):

- **parse**: :func:`appliance.text.markdown.parse` of a 2 kB reply (markdown-it-py and
  the walk that maps every spoken character back to the source), beside markdown-it-py's
  own ``parse`` of the same source, with its rules as shipped and behind ttsd's guards
  (:mod:`appliance.text.markdown_rules`: the same tokens; the floor this design can
  reach) — goal ≤ 1 ms;
- **whole frontend**: ``prepare(..., text_format="markdown")`` against ``prepare`` of the
  same reply as plain text (the frontend's normalising and splitting cost the same words):
  the ratio is what Markdown adds to a request;
- **frontend before the first clause**: what a one-shot request's first clause waits for,
  the whole text's frontend before, its head's now
  (:func:`appliance.core.headfirst.prepare_head`: finding the cut and the head's
  frontend; the rest is prepared while the head is spoken), as Markdown and as plain text;
- **hostile**: the parse time of sources built to be slow (deep nesting, a long table row,
  an unclosed fence, unmatched brackets, emphasis runs; many short lines, blocks, rows,
  list items, cells, autolinks, tags, entities or other markup characters) at the default
  ``limits.max_text_chars`` (20 000) — goal ≤ 50 ms.
"""

from __future__ import annotations

import functools
import statistics
import time
from collections.abc import Callable
from typing import Any

REPLY = """## Three dinner ideas

**Sure!** Here are three options for tonight, each ready in *under 30 minutes*:

1. **Pasta al pomodoro** – spaghetti, tomatoes, garlic and basil. Cook the pasta in salted water.
2. **Stir-fry** with `soy sauce`, ginger and whatever vegetables you have.
   - Use a hot pan.
   - Add the sauce last.
3. **Omelette** – see [this guide](https://example.com/omelette) for the technique.

| Dish | Time | Difficulty |
|------|------|------------|
| Pasta | 20 min | easy |
| Stir-fry | 15 min | medium |
| Omelette | 10 min | easy |

> Tip: prepare everything before you start cooking.

```python
print("bon appétit")
```

---

Let me know if you want a *shopping list* or ~~dessert~~ wine pairings!
"""


def _reply_2k() -> str:
    text = REPLY
    while len(text) < 2048:
        text += "\n\n" + REPLY
    return text[:2048]


def _time_ms(fn: Callable[[], object], runs: int) -> dict[str, float]:
    for _ in range(3):
        fn()
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000.0)
    samples.sort()
    return {"p50_ms": statistics.median(samples), "p95_ms": samples[int(0.95 * (runs - 1))]}


def bench_markdown(runs: int = 200) -> dict[str, Any]:
    from appliance.core.headfirst import prepare_head
    from appliance.text.frontend import FrontendLimits, prepare
    from appliance.text.markdown import _MD, _parser, parse
    from tests.text.markdown_cases import HOSTILE

    reply = _reply_2k()
    limits = FrontendLimits(max_chars=20000, sentence_chars=300)
    out: dict[str, Any] = {"reply_chars": len(reply)}
    out["parse"] = _time_ms(lambda: parse(reply), runs)
    shipped = _parser(guarded=False)
    out["markdown_it_only"] = _time_ms(lambda: shipped.parse(reply), runs)
    out["markdown_it_guarded"] = _time_ms(lambda: _MD.parse(reply), runs)
    out["frontend_markdown"] = _time_ms(
        lambda: prepare(reply, "en_US", limits, text_format="markdown"), max(20, runs // 4)
    )
    out["frontend_plain"] = _time_ms(lambda: prepare(reply, "en_US", limits), max(20, runs // 4))
    for fmt in ("markdown", "text"):
        out[f"first_clause_{fmt}"] = _time_ms(
            functools.partial(prepare_head, prepare, reply, "en_US", limits, text_format=fmt),
            max(20, runs // 4),
        )
    out["hostile"] = {
        name: _time_ms(functools.partial(parse, src), 5)["p50_ms"] for name, src in HOSTILE.items()
    }
    return out


def format_table(r: dict[str, Any]) -> str:
    lines = [
        f"Reply of {r['reply_chars']} characters (goal: parse ≤ 1 ms).",
        "",
        "| step | P50 | P95 |",
        "|---|---|---|",
    ]
    for key, label in (
        ("parse", "appliance.text.markdown.parse"),
        ("markdown_it_only", "markdown-it-py's parse alone, rules as shipped"),
        ("markdown_it_guarded", "markdown-it-py's parse alone, rules guarded"),
        ("frontend_markdown", "whole frontend, text_format markdown"),
        ("frontend_plain", "whole frontend, the same source as plain text"),
    ):
        lines.append(f"| {label} | {r[key]['p50_ms']:.2f} ms | {r[key]['p95_ms']:.2f} ms |")
    ratio = r["frontend_markdown"]["p50_ms"] / r["frontend_plain"]["p50_ms"]
    lines += ["", f"Markdown frontend / plain frontend: {ratio:.2f}×", ""]
    lines += [
        "| frontend before the first clause | whole text (as before) P50 | head first P50 |",
        "|---|---|---|",
    ]
    for fmt, whole in (("markdown", "frontend_markdown"), ("text", "frontend_plain")):
        head = r[f"first_clause_{fmt}"]["p50_ms"]
        lines.append(f"| {fmt} | {r[whole]['p50_ms']:.2f} ms | {head:.2f} ms |")
    lines += ["", "| hostile source (≤ 20 000 chars) | parse P50 (goal ≤ 50 ms) |", "|---|---|"]
    lines += [f"| {name} | {ms:.1f} ms |" for name, ms in r["hostile"].items()]
    return "\n".join(lines)
