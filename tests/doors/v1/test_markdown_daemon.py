"""Markdown through the real daemon (issue 28): ``phonemes`` says the words a person reads,
spans index the source, a text stream says the same, ASR hears no markup, and each door's
default is its config key (v1: text; HTTP and Wyoming: markdown, tested in their doors)."""

from __future__ import annotations

import random
import time
from typing import Any

import numpy as np
import pytest

from appliance.clients.client import Client, TtsdError
from tests.asr import recognize, word_errors
from tests.conftest import Daemon, DaemonFactory
from tests.text.markdown_cases import CASES, MARKUP

ZERO = {"noise_scale": 0.0, "noise_w": 0.0}


def said(daemon: Daemon, text: str, **opts: Any) -> list[dict[str, Any]]:
    with Client(daemon.socket) as c:
        return list(c.request("phonemes", text=text, **opts)["clauses"])


@pytest.mark.parametrize(("name", "source", "words"), CASES, ids=[c[0] for c in CASES])
def test_phonemes_say_the_words_and_no_markup(
    daemon: Daemon, name: str, source: str, words: str
) -> None:
    clauses = said(daemon, source, text_format="markdown")
    assert " ".join(c["text"] for c in clauses) == words
    for c in clauses:
        a, b = c["span"]
        assert 0 <= a < b <= len(source)
        assert not MARKUP.search(c["text"])


def test_v1_reads_plain_text_unless_asked(daemon: Daemon) -> None:
    clauses = said(daemon, "**Sure!** Here.")
    assert clauses[0]["text"].startswith("**Sure!**")  # v1.text_format: text (the default)


def test_v1_default_is_a_config_key(daemon_factory: DaemonFactory) -> None:
    d = daemon_factory({"v1": {"text_format": "markdown"}})
    assert " ".join(c["text"] for c in said(d, "**Sure!** Here.")) == "Sure! Here."
    assert said(d, "**Sure!** Here.", text_format="text")[0]["text"] == "**Sure!** Here."


def _synth(daemon: Daemon, text: str, **opts: Any) -> tuple[np.ndarray, list[dict[str, Any]]]:
    with Client(daemon.socket) as c:
        res = c.synthesize_all(text, **{**ZERO, **opts})
    return np.frombuffer(res.audio, dtype="<i2"), res.chunks


REPLY = (
    "## Weather\n\n"
    "**Sure!** The *rain* stops at noon.\n\n"
    "- Take an `umbrella`\n"
    "- Wear [boots](https://example.com/boots)\n"
)
REPLY_WORDS = "weather sure the rain stops at noon take an umbrella wear boots"
PLAIN = "Weather. Sure! The rain stops at noon. Take an umbrella. Wear boots."


def _spans_inside(source: str, chunks: list[dict[str, Any]]) -> None:
    last = 0
    for ch in chunks:
        a, b = ch["text_span"]
        assert 0 <= a <= b <= len(source) and a >= last, (a, b, last)
        last = a
        assert not source[a:b].startswith(("#", "-", "*", "`")), source[a:b]


def test_asr_hears_the_words_and_no_markup(daemon: Daemon) -> None:
    md, chunks = _synth(daemon, REPLY, text_format="markdown")
    plain, _ = _synth(daemon, PLAIN)
    raw, _ = _synth(daemon, REPLY, text_format="text")
    heard = recognize(md, 22050)
    e_md, n = word_errors(REPLY_WORDS, heard)
    e_plain, _ = word_errors(REPLY_WORDS, recognize(plain, 22050))
    assert e_md <= e_plain + 1 and e_md / n < 0.5, (heard, e_md, e_plain)
    # Read as text, the markup is said: far more audio than the Markdown reading.
    assert len(raw) > 1.2 * len(md)
    _spans_inside(REPLY, chunks)
    assert chunks[-1]["text_span"][1] <= len(REPLY)


def _tokens(text: str, seed: int) -> list[str]:
    rnd = random.Random(seed)
    out, pos = [], 0
    while pos < len(text):
        step = rnd.randint(1, 5)
        out.append(text[pos : pos + step])
        pos += step
    return out


def test_a_markdown_text_stream_says_the_same_words(daemon: Daemon) -> None:
    whole, _ = _synth(daemon, REPLY, text_format="markdown")
    with Client(daemon.socket) as c:
        ts = c.text_stream(text_format="markdown", **ZERO)
        for tok in _tokens(REPLY, 7):
            ts.append(tok)
            time.sleep(0.005)
        ts.finish()
        res = ts.collect()
    audio = np.frombuffer(res.audio, dtype="<i2")
    _spans_inside(REPLY, res.chunks)
    e_stream, n = word_errors(REPLY_WORDS, recognize(audio, 22050))
    e_whole, _ = word_errors(REPLY_WORDS, recognize(whole, 22050))
    assert e_stream <= e_whole + 1 and e_stream / n < 0.5
    # Same words, cut where blocks end: about the same length of speech.
    assert 0.8 < len(audio) / len(whole) < 1.25


def test_a_fence_that_never_closes_is_bounded(daemon: Daemon) -> None:
    """Held until finish (what whole-text Markdown does: the rest is code, not read)."""
    with Client(daemon.socket) as c:
        ts = c.text_stream(text_format="markdown", **ZERO)
        ts.append("Here is the code.\n\n```python\n")
        for _ in range(50):
            ts.append("print('never closed')\n")
        ts.finish()
        res = ts.collect()
    assert res.chunks and not res.cancelled
    assert all(ch["text_span"][1] <= len("Here is the code.") for ch in res.chunks)


def test_nothing_but_markup_is_empty_text(daemon: Daemon) -> None:
    with Client(daemon.socket) as c:
        with pytest.raises(TtsdError) as exc:
            c.synthesize_all("```\nonly code\n```", text_format="markdown")
        assert exc.value.code == "empty_text"
        assert c.ping()
