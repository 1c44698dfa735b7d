"""The normaliser benchmark reports sane per-sentence statistics."""

from __future__ import annotations

from bench.normalize import TYPICAL_SENTENCES, bench_normalizer


def test_bench_reports_per_sentence_times() -> None:
    stats = bench_normalizer(["It costs $3.50 on Jan. 5, 2027.", "Hello."], repeat=5)
    assert stats["sentences"] == 2
    assert 0 < stats["p50_ms"] <= stats["p95_ms"] <= stats["max_ms"]
    # A generous sanity bound, not a speed target (the target, 1 ms, is checked by make bench).
    assert stats["mean_ms"] < 50


def test_bench_has_about_twenty_typical_sentences() -> None:
    assert len(TYPICAL_SENTENCES) >= 20
