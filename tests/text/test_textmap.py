from __future__ import annotations

from appliance.text.textmap import Builder, MappedText


def test_sub_maps_replacement_to_match() -> None:
    mt = MappedText.identity("pay $5 now")
    out = mt.sub(r"\$(\d)", lambda m: f"{m.group(1)} dollars")
    assert out.text == "pay 5 dollars now"
    i = out.text.index("dollars")
    assert out.span(i, i + 7) == (4, 6)
    assert out.span(0, 3) == (0, 3)


def test_none_keeps_match_and_chaining() -> None:
    mt = MappedText.identity("a1b2").sub(r"\d", lambda m: None if m.group() == "1" else "two")
    assert mt.text == "a1btwo"
    assert mt.span(3, 6) == (3, 4)
    again = mt.map_chars(lambda c: c.upper())
    assert again.text == "A1BTWO" and again.span(0, 6) == (0, 4)


def test_builder_and_empty_span() -> None:
    b = Builder()
    src = MappedText.identity("hello")
    b.copy(src, 1, 3)
    b.add("!", 4, 5)
    out = b.build()
    assert out.text == "el!" and out.span(0, 3) == (1, 5)
    assert out.span(1, 1) == (2, 2)
