"""Where text may be cut: every rule, pure (a string in, a position out; no stream state).

The text streams (:mod:`appliance.core.textstream`), the head-first preparation
(:mod:`appliance.core.headfirst`) and the frontend (:func:`appliance.text.frontend.split_clauses`)
call these; a cut is a count of leading characters of the text asked about (0: not yet).

- :mod:`~appliance.text.cuts.clause` — a sentence too long to encode whole
  (``limits.max_clause_chars``): :func:`~appliance.text.cuts.clause.long_sentence_cut`, at
  its last ``;``, ``:`` or spaced dash within the limit, else its last comma, else its last
  space, else the limit itself; :func:`~appliance.text.cuts.clause.latency_cut`, the
  opt-in ``streaming.first_clause_chars`` cut of a first clause, at the last clause mark
  past a third of the limit, else a space there, else the limit.  Reads ``limit + 1``
  characters.
- :mod:`~appliance.text.cuts.stream` — a plain text that streams in
  (:func:`~appliance.text.cuts.stream.release_point`):

  - a segment ends at a sentence end followed by whitespace (the frontend's own sentence
    ends, :func:`appliance.text.frontend.split_sentences`: "Dr.", "e.g.", "3.50",
    "3:30 pm" are never cut);
  - a sentence end that nothing after it can undo (``?``, ``!``, a full stop after a word
    that is no abbreviation, initial or number:
    :func:`appliance.text.frontend.ends_finally`) is released as it arrives, without
    waiting for the whitespace after it; a closing quote or a second dot that comes in
    the next token then goes with the next segment (nothing is said for it);
  - the first segment of a request is also released at a clause mark (``, ; :`` or a
    spaced dash, followed by whitespace) once it holds ``first_chars`` characters: the one
    documented trade of prosody for latency in a stream;
  - after ``idle_ms`` without new text, up to its last clause mark, else its last word
    boundary (the only time a segment ends at a bare space); an eager start
    (``text_start: eager``) cuts at the last word boundary
    (:func:`~appliance.text.cuts.stream.word_cut`);
  - with less than ``low_water_ms`` of audio left to play, a later segment is released at
    its last clause mark: a pause where the text has one rather than a stall;
  - a segment never waits beyond ``max_chars``: it is cut as a sentence that long is
    (:func:`~appliance.text.cuts.clause.long_sentence_cut`).

  :func:`~appliance.text.cuts.stream.sentence_cuts` lists the sentence cuts of a whole
  text.  Linear in the pending text; the last four texts' cuts are remembered.
- :mod:`~appliance.text.cuts.blocks` — Markdown that streams in
  (:func:`~appliance.text.cuts.blocks.markdown_release_point`): at the end of a complete
  block, inside a paragraph where the plain rule cuts (never inside an open link, tag or
  code span), a fence or table held until it ends.  Linear: one pass line by line.
- :mod:`~appliance.text.cuts.head` — a long one-shot text cut into a head and a tail
  (:func:`~appliance.text.cuts.head.head_cut`): at the first sentence end (or, in
  Markdown, the first paragraph start after a blank line) past ``HEAD_CHARS`` in texts of
  ``HEAD_MIN_CHARS`` or more, reading at most ``HEAD_SCAN`` characters.
- Markdown's parse budget (where a long source stops being parsed and is read plainly)
  is :func:`appliance.text.markdown_budget.budget_cut`, beside the cost it measures.

This package's ``__init__`` imports nothing: the frontend imports
:mod:`~appliance.text.cuts.clause`, and the stream rules import the frontend's sentence
ends, so each rule is imported from its module.
"""
