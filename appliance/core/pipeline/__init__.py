"""The synthesis pipeline, as named stages (conducted by :mod:`appliance.core.streaming`).

- :mod:`.types` — the hand-off types between stages (frozen where they cross threads).
- :mod:`.encode` — on inference workers: pure functions of immutable inputs (ids,
  bounded encodes, the first clause's chunk plan and first chunk, pause frames, the
  words' ids), each the body of one work item, returning its result.
- :mod:`.start` — start strategies: how a request's first sentence starts (a worker half
  that makes provisional first audio, a loop half that plays it and hands over at a join);
  today the quick start.
- :mod:`.shape` — on the loop: fades, gain, SSML silence, the time-stretch (samples in,
  samples out).
- :mod:`.timeline` — on the loop: the one owner of output time (ms sent, sequence,
  marks, words, stalls, deadlines) → :class:`~appliance.speech.Chunk`.

Which thread runs what is structural: worker code is the functions of :mod:`.encode` and
a strategy's ``open``; everything that holds state across chunks (:class:`.shape.Output`,
:class:`.timeline.Timeline`, the job) belongs to one job and is touched only on its loop.
"""
