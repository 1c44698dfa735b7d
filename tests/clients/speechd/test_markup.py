"""The speech-dispatcher module's own lenient SSML scanner (used when ttsd refuses the
SSML): text runs and marks in order, whatever the markup."""

from __future__ import annotations

import pytest

from appliance.clients.speechd.markup import MarkItem, Text, to_items


@pytest.mark.parametrize(
    ("ssml", "items"),
    [
        (
            "<speak>Hello <mark name='a'/>world</speak>",
            [Text("Hello "), MarkItem("a"), Text("world")],
        ),
        ("<speak><s>One</s><s>two</s></speak>", [Text(" One two ")]),
        ("a <!-- b --> c <?pi x?> d", [Text("a c d")]),
        ("a <![CDATA[<b> & c]]> d", [Text("a <b> & c d")]),
        ("<!DOCTYPE x [<!ENTITY e 'boom'>]>&e; ok", [Text("&e; ok")]),
        ("a < b <i>c</i>", [Text("a < b c")]),  # a "<" with another before its ">": text
        ("keep <!-- no end", [Text("keep ")]),
        # No tag name at all: the scanner raised IndexError here, and the module then
        # dropped the message ("speaking failed") instead of speaking it.
        ("<speak>Hi <\n> there</ \t>!</speak>", [Text("Hi there!")]),
    ],
)
def test_text_and_marks_in_order(ssml: str, items: list[object]) -> None:
    got = to_items(ssml)
    assert [type(i) for i in got] == [type(i) for i in items]
    for g, want in zip(got, items, strict=True):
        if isinstance(want, Text):
            assert isinstance(g, Text) and g.text.strip() == want.text.strip()
        else:
            assert g == want
