"""streaming-vits's time to first audio, in its own process and venv (bench/prosody.py).

Run by the bench-only venv's Python, never imported by ttsd:

    python streaming_vits_first_audio.py MODEL THREADS RUNS < texts.json

Prints ``{name: [ms, ...]}``: for each text, ``RUNS`` times (after two warm-ups) from
calling ``StreamingTTS.stream(text)`` to its first chunk, phonemes included — what a
program using it in process waits for before the first sound.
"""

from __future__ import annotations

import json
import sys
import time

from streaming_vits import StreamingTTS


def main() -> None:
    model, threads, runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    texts: dict[str, str] = json.loads(sys.stdin.read())
    tts = StreamingTTS(model, threads=threads, verbose=False)
    out: dict[str, list[float]] = {}
    for name, text in texts.items():
        times: list[float] = []
        for i in range(runs + 2):
            t0 = time.perf_counter()
            next(iter(tts.stream(text)))
            if i >= 2:
                times.append((time.perf_counter() - t0) * 1000)
        out[name] = times
    print(json.dumps(out))


if __name__ == "__main__":
    main()
