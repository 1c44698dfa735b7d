"""Time the text normaliser per sentence (``make bench`` reports it)."""

from __future__ import annotations

import statistics
import time

from appliance.text.normalize import normalize
from appliance.text.textmap import MappedText

TYPICAL_SENTENCES: tuple[str, ...] = (
    "Turn left in 300 m, then continue for 2.5 km.",
    "It's 3:30 pm and the temperature is −5°C.",
    "Your order of $23.50 will arrive on Jan. 5, 2027.",
    "Dr. Smith will see you at 10:15 a.m. tomorrow.",
    "The battery is at 25% — about 2 h of playback left.",
    "Call (555) 123-4567 to confirm your booking.",
    "The meeting moved to 12/05/2026 at 15:45.",
    "Traffic on Main St. is heavy; expect 10–15 minutes of delay.",
    "Version 3.11.7 fixes 42 bugs.",
    "The population grew by 1,234,567 people in 2023.",
    "Set the oven to 180°C and bake for 25 min.",
    "You have 3 new messages and 1 missed call.",
    "The 2nd train leaves from platform 4 at 6:05.",
    "Wind from the north at 30 km/h, gusts up to 60 mph.",
    "Send the report to support@example.com by Friday.",
    "The file is 1.5 GB and downloads in about 40 s.",
    "Mr. and Mrs. Jones paid €1,200 for the trip.",
    "In 1999 the team won 3-2 after extra time.",
    "Your balance is -$12.75, e.g. after the last fee.",
    "Hello, how can I help you today?",
)


def bench_normalizer(sentences: list[str] | None = None, repeat: int = 200) -> dict[str, float]:
    """Per-sentence normalisation time in ms over ``repeat`` rounds: mean, p50, p95, max."""
    texts = [MappedText.identity(s) for s in (sentences or list(TYPICAL_SENTENCES))]
    for text in texts:  # first calls pay for lazy regex and num2words setup
        normalize(text, "en_US")
    samples: list[float] = []
    for _ in range(repeat):
        for text in texts:
            t0 = time.perf_counter()
            normalize(text, "en_US")
            samples.append((time.perf_counter() - t0) * 1e3)
    samples.sort()
    return {
        "mean_ms": statistics.fmean(samples),
        "p50_ms": samples[len(samples) // 2],
        "p95_ms": samples[min(len(samples) - 1, int(len(samples) * 0.95))],
        "max_ms": samples[-1],
        "sentences": float(len(texts)),
    }


if __name__ == "__main__":
    for key, value in bench_normalizer().items():
        print(f"normalize {key}: {value:.3f}")
