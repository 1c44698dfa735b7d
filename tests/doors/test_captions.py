"""Cue text in WebVTT and SRT: escaped once, from the text as shown, and never a "-->"."""

from __future__ import annotations

import pytest

from appliance.doors.captions import Cue, CueBuilder, srt, webvtt
from appliance.speech import Word


def cue_line(rendered: str) -> str:
    """The text line of a one-cue WebVTT or SRT."""
    lines = rendered.split("\n")
    return lines[lines.index(next(x for x in lines if " --> " in x)) + 1]


@pytest.mark.parametrize("text", ["x-->y", "x--->y", "x----->y", "a --> b ---> c"])
def test_no_time_separator_in_a_cue(text: str) -> None:
    """ "x--->y" became "x-->y": the guard made what it guarded against."""
    cues = [Cue(0, 500, text)]
    assert "-->" not in cue_line(srt(cues))
    vtt = cue_line(webvtt(cues))
    assert "-->" not in vtt
    assert vtt.replace("&gt;", ">") == text  # WebVTT shows it as written


def words(text: str, *tokens: str) -> list[Word]:
    out, at = [], 0
    for k, token in enumerate(tokens):
        at = text.index(token, at)
        out.append(Word((at, at + len(token)), 100.0 * k, 90.0))
        at += len(token)
    return out


@pytest.mark.parametrize("text_format", ["markdown", "ssml"])
def test_markup_references_are_read_then_escaped_once(text_format: str) -> None:
    """A Markdown source's "&amp;" showed as "&amp;amp;" in a WebVTT cue."""
    text = "Salt &amp; pepper"
    b = CueBuilder(text, text_format=text_format)
    b.add(words(text, "Salt", "&amp;", "pepper"), sentence_end=True)
    (cue,) = b.finish()
    assert cue.text == "Salt & pepper"
    assert cue_line(webvtt([cue])) == "Salt &amp; pepper"
    assert cue_line(srt([cue])) == "Salt & pepper"


def test_plain_text_keeps_what_was_written() -> None:
    text = "Salt &amp; pepper"
    b = CueBuilder(text)
    b.add(words(text, "Salt", "&amp;", "pepper"), sentence_end=True)
    (cue,) = b.finish()
    assert cue.text == "Salt &amp; pepper"
    assert cue_line(webvtt([cue])) == "Salt &amp;amp; pepper"  # shown as written
