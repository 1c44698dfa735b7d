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


def test_a_replacement_s_word_maps_to_the_match_without_its_spaces() -> None:
    """ " & " → " and ": the word is the "&" alone, each space the space it stands for (a
    word's span took in the spaces around an operator or a decoded entity)."""
    mt = MappedText.identity("Tom & Jerry").sub(r"\s*&\s*", " and ")
    assert mt.text == "Tom and Jerry"
    i = mt.text.index("and")
    assert mt.span(i, i + 3) == (4, 5)
    assert mt.span(i - 1, i) == (3, 4) and mt.span(i + 3, i + 4) == (5, 6)
    # No space in the match: all of the replacement stands for all of it, as before.
    glued = MappedText.identity("Tom&Jerry").sub("&", " and ")
    assert glued.span(0, len(glued)) == (0, 9) and glued.span(4, 7) == (3, 4)
    # Only spaces: nothing to tell apart.
    spaces = MappedText.identity("a   b").sub(r"\s+", " ")
    assert spaces.text == "a b" and spaces.span(1, 2) == (1, 4)
