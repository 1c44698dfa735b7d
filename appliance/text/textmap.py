"""Text that remembers where each character came from.

The frontend rewrites text many times (NFKC, punctuation, emoji removal,
number expansion …) but every chunk's ``text_span`` must point into the text
the *client* sent.  ``MappedText`` carries, for each character of the current
text, the [start, end) range of original characters it stands for.  Rewrites
go through :meth:`MappedText.sub` or :class:`Builder`, which keep the map.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class MappedText:
    text: str
    starts: tuple[int, ...]
    ends: tuple[int, ...]

    def __post_init__(self) -> None:
        if not (len(self.text) == len(self.starts) == len(self.ends)):
            raise ValueError("map length differs from text length")

    @classmethod
    def identity(cls, text: str) -> MappedText:
        n = len(text)
        return cls(text, tuple(range(n)), tuple(range(1, n + 1)))

    def __len__(self) -> int:
        return len(self.text)

    def span(self, i: int, j: int) -> tuple[int, int]:
        """Original [start, end) covered by current characters [i, j)."""
        if j <= i:
            if not self.starts:
                return (0, 0)
            k = min(i, len(self.starts) - 1)
            pos = self.starts[k] if i < len(self.starts) else self.ends[-1]
            return (pos, pos)
        return (min(self.starts[i:j]), max(self.ends[i:j]))

    def slice(self, i: int, j: int) -> MappedText:
        return MappedText(self.text[i:j], self.starts[i:j], self.ends[i:j])

    def sub(
        self,
        pattern: re.Pattern[str] | str,
        repl: str | Callable[[re.Match[str]], str | None],
        count: int = 0,
    ) -> MappedText:
        """Like ``re.sub``; replacement text maps to the span of the whole match, but for
        whitespace the match has at either end: the replacement's own whitespace there maps
        to it, the rest of the replacement to the rest of the match (" & " → " and ": the
        word "and" is the ``&`` alone, so a word's span is not its spaces).

        A callable returning ``None`` leaves that match unchanged (and keeps its
        exact per-character map).
        """
        rx = re.compile(pattern) if isinstance(pattern, str) else pattern
        out = Builder()
        pos = 0
        done = 0
        for m in rx.finditer(self.text):
            new = repl if isinstance(repl, str) else repl(m)
            if new is None:
                continue
            out.copy(self, pos, m.start())
            self._replaced(out, new, m.start(), m.end())
            pos = m.end()
            done += 1
            if count and done >= count:
                break
        if not done:
            return self  # nothing replaced: no copy of the map
        out.copy(self, pos, len(self.text))
        return out.build()

    def _replaced(self, out: Builder, new: str, a: int, b: int) -> None:
        """``new`` for characters [a, b): its inner part mapped to theirs without the
        whitespace at their ends, its own leading and trailing whitespace to that."""
        text = self.text
        lo, hi = a, b
        while lo < hi and text[lo].isspace():
            lo += 1
        while hi > lo and text[hi - 1].isspace():
            hi -= 1
        body = new.strip()
        if (lo == a and hi == b) or lo == hi or not body:
            out.add(new, *self.span(a, b))  # no whitespace to tell apart
            return
        core = self.span(lo, hi)
        head = new[: len(new) - len(new.lstrip())]
        tail = new[len(head) + len(body) :]
        out.add(head, *(self.span(a, lo) if lo > a else core))
        out.add(body, *core)
        out.add(tail, *(self.span(hi, b) if hi < b else core))

    def map_chars(self, fn: Callable[[str], str]) -> MappedText:
        """Apply ``fn`` to each character; its output maps to that character."""
        out = Builder()
        run = 0  # unchanged characters since ``run`` are copied in one piece
        for k, ch in enumerate(self.text):
            new = fn(ch)
            if new != ch:
                out.copy(self, run, k)
                out.add(new, self.starts[k], self.ends[k])
                run = k + 1
        if run == 0:
            return self
        out.copy(self, run, len(self.text))
        return out.build()


class Builder:
    """Accumulates text pieces with their original spans."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._starts: list[int] = []
        self._ends: list[int] = []

    def add(self, text: str, start: int, end: int) -> None:
        """Append ``text``; every character of it stands for original [start, end)."""
        self._parts.append(text)
        self._starts.extend([start] * len(text))
        self._ends.extend([end] * len(text))

    def add_source(self, text: str, start: int) -> None:
        """Append ``text`` as it stands in the original at ``start`` (one to one)."""
        self._parts.append(text)
        self._starts.extend(range(start, start + len(text)))
        self._ends.extend(range(start + 1, start + len(text) + 1))

    def copy(self, src: MappedText, i: int, j: int) -> None:
        """Append characters [i, j) of ``src`` with their own map."""
        if j <= i:
            return
        self._parts.append(src.text[i:j])
        self._starts.extend(src.starts[i:j])
        self._ends.extend(src.ends[i:j])

    def build(self) -> MappedText:
        return MappedText("".join(self._parts), tuple(self._starts), tuple(self._ends))
