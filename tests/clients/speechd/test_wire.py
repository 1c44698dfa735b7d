"""The module-protocol pieces: 705 framing as the server parses it, settings, the config,
the markup fallback and the names CHAR and KEY say."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from appliance.clients.speechd import config, markup, names, wire
from tests.clients.speechd.modpipe import parse_audio


@given(st.binary(max_size=4096).filter(lambda b: len(b) % 2 == 0))
def test_audio_block_round_trips_through_the_servers_parser(pcm: bytes) -> None:
    block = wire.AudioBlock(pcm, 22050).encode()
    lines = block.rstrip(b"\n").split(b"\n")
    assert lines[-1] == b"705 AUDIO"
    # No raw newline inside the samples: the server reads the block line by line.
    assert sum(ln.startswith(b"705-AUDIO\0") for ln in lines) == 1
    got, rate = parse_audio(lines)
    assert (got, rate) == (pcm, 22050)


def test_escape_is_hdlc() -> None:
    assert wire.hdlc_escape(b"a\nb}c") == b"a}\x2ab}]c"
    assert wire.hdlc_unescape(b"a}\x2ab}]c") == b"a\nb}c"


def test_audio_block_rejects_odd_bytes_and_bad_rates() -> None:
    with pytest.raises(ValueError):
        wire.AudioBlock(b"\x00", 22050)
    with pytest.raises(ValueError):
        wire.AudioBlock(b"\x00\x00", 0)


def test_lines_cannot_break_the_framing() -> None:
    assert wire.line("a\nb\rc") == b"a b c\n"
    assert wire.index_mark("x\ny") == b"700-x y\n700 INDEX MARK\n"


def test_settings_validated_in_one_place() -> None:
    s = wire.Settings.from_pairs(
        [("rate", "-20"), ("synthesis_voice", "NULL"), ("language", "en-GB"), ("new", "1")]
    )
    assert (s.rate, s.synthesis_voice, s.language) == (-20, None, "en-GB")
    for bad in (("rate", "101"), ("volume", "x"), ("pitch", "-101")):
        with pytest.raises(ValueError):
            wire.Settings.from_pairs([bad])
    with pytest.raises(ValueError):
        wire.parse_pair(b"no equals")


def test_config_parses_dotconf() -> None:
    cfg = config.parse(
        '# comment\nTtsdSocket "/run/x.sock"\nttsdmode reading\n'
        'AddVoice "en" "MALE1" "joe"\nAddVoice "en-GB" "female1" "alba"\n'
        'AddVoice "de" "MALE1" \\\n  "thorsten"\nDebug 1\nSomethingNew 3\n'
    )
    assert cfg.socket == "/run/x.sock" and cfg.mode == "reading" and cfg.log_level == 5
    assert cfg.voice_for("en-US", "MALE1") == "joe"
    assert cfg.voice_for("en-GB", "FEMALE1") == "alba"
    assert cfg.voice_for("en_gb", "female1") == "alba"
    assert cfg.voice_for("de", "MALE1") == "thorsten"
    assert cfg.voice_for("fr", "MALE1") is None
    assert cfg.voice_for("en", None) is None
    assert cfg.deterministic  # on unless TtsdDeterministic 0
    assert not config.parse("TtsdDeterministic 0\n").deterministic


@pytest.mark.parametrize(
    "text",
    [
        'TtsdMode "fast"\n',
        'AddVoice "en" "ROBOT" "x"\n',
        "AddVoice en\n",
        'TtsdSocket "a\n',
        "LogLevel high\n",
        "TtsdSocket a b\n",
        "TtsdDeterministic maybe\n",
    ],
)
def test_config_errors_name_the_line(text: str) -> None:
    with pytest.raises(config.ConfigError, match=r"ttsd\.conf:1"):
        config.parse(text)


def test_shipped_conf_parses() -> None:
    from tests.clients.speechd.spd import REPO

    cfg = config.load(REPO / "speechd/ttsd.conf")
    assert cfg.socket is None  # the client's own default: a per-user daemon, then /run/ttsd
    assert cfg.voice_for("en", "MALE1") == "en_US-joe-medium"


def test_markup_keeps_text_and_marks_in_order() -> None:
    items = markup.to_items(
        '<speak><s>Hello &amp; welcome</s><mark name="__spd_1"/><s>to &lt;ttsd&gt;</s>'
        "<mark name='m&amp;2'/></speak>"
    )
    assert items == [
        markup.Text("Hello & welcome"),
        markup.MarkItem("__spd_1"),
        markup.Text("to <ttsd>"),
        markup.MarkItem("m&2"),
    ]


def test_markup_never_expands_declared_entities() -> None:
    doc = '<!DOCTYPE x [<!ENTITY a "AAAA"><!ENTITY e SYSTEM "file:///etc/passwd">]><speak>&a;&e;</speak>'
    assert markup.to_items(doc) == [markup.Text("&a;&e;")]


@pytest.mark.parametrize(
    "hostile",
    [
        "<!--" * 250_000,
        "<" * 1_000_000,
        "<!" * 500_000,
        "<a" * 500_000,
        "<![CDATA[" * 100_000,
        "&#x" * 300_000,
        "<x " + "a='1' " * 150_000,
    ],
)
def test_markup_is_fast_on_hostile_input(hostile: str) -> None:
    t = time.monotonic()
    markup.to_items(hostile)
    assert time.monotonic() - t < 20  # linear: well under a second; generous on a busy box


def test_split_long_keeps_every_word() -> None:
    text = " ".join(f"word{i}." for i in range(500))
    pieces = markup.split_long(text, 100)
    assert all(len(p) <= 100 for p in pieces)
    assert " ".join(pieces).split() == text.split()
    assert markup.split_long("x" * 250, 100) == ["x" * 100, "x" * 100, "x" * 50]


@pytest.mark.parametrize(
    ("kind", "text", "said"),
    [
        ("char", "a", "a"),
        ("char", "space", "space"),
        ("char", "?", "question mark"),
        ("char", "é", "é"),
        ("char", "€", "euro sign"),
        ("key", "shift_a", "shift a"),
        ("key", "control_alt_delete", "control alt delete"),
        ("key", "kp-enter", "keypad enter"),
        ("key", "Return", "enter"),
        ("key", "F1", "F1"),
        ("key", "page_up", "page up"),
    ],
)
def test_char_and_key_names(kind: str, text: str, said: str) -> None:
    fn = names.char_words if kind == "char" else names.key_words
    assert fn(text) == said
