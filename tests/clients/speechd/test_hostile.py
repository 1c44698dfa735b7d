"""Hostile SPEAK bodies: nothing crashes, every SPEAK ends with 702 or 703, and the module
keeps serving.  Also a daemon that goes away mid-speech and comes back."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.clients.speechd.modpipe import ModulePipe
from tests.conftest import Daemon, DaemonFactory

BILLION_LAUGHS = (
    '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol "lol">'
    + "".join(
        f'<!ENTITY lol{i} "{("&lol" + str(i - 1) + ";") * 10}">' for i in range(1, 10)
    ).replace("&lol0;", "&lol;")
    + "]><speak>&lol9; and the end.</speak>"
)
EXTERNAL = (
    '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>'
    "<speak>Secret: &xxe; done.</speak>"
)
NESTED = "<speak>" + "<prosody rate='fast'>" * 10000 + "deep" + "</prosody>" * 10000 + "</speak>"

HOSTILE: dict[str, bytes] = {
    "entities": b"<speak>1 &lt; 2 &amp;&amp; 3 &gt; 2 &quot;q&quot; &apos;a&apos; &#65;&#x42; &#0; "
    b"&#xD800; &#1114112; &bogus; &amp</speak>",
    "billion_laughs": BILLION_LAUGHS.encode(),
    "external_entity": EXTERNAL.encode(),
    "nested_10000": NESTED.encode(),
    "unclosed": b"<speak><s>Unclosed <prosody rate='x'> tags <mark name='m1'> and <",
    "bad_mark": b'<speak>a<mark/>b<mark name=""/>c<mark name="' + b"n" * 5000 + b'"/>d</speak>',
    "invalid_utf8": b"<speak>Caf\xc3 \xff\xfe na\xefve \xed\xa0\x80 ok.</speak>",
    "nul_and_controls": b"<speak>nul\x00 bell\x07 esc\x1b[31m red</speak>",
    "only_markup": b"<speak><mark name='x'/><break time='1s'/></speak>",
    "many_marks": (
        "<speak>" + "".join(f"w{i} <mark name='m{i}'/>" for i in range(30)) + "</speak>"
    ).encode(),
    "cdata_comment_pi": b"<speak><![CDATA[<b>x</b>]]><!-- c --><?pi x?> text <!-- never closed",
    "not_ssml": b"plain text with a < and a > and & alone",
    "emoji_and_han": "<speak>\U0001f600 \u6f22\u5b57\u6f22\u5b57 hello</speak>".encode(),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_speak_ends_and_the_module_lives(module: ModulePipe, name: str) -> None:
    module.set()
    module.speak(HOSTILE[name])
    events = module.events_until_end(timeout=120)
    assert events[0].code == 701
    assert events[-1].code in (702, 703)
    assert all(r.code in (700, 705) for r in events[1:-1])
    if name == "external_entity":
        assert "root:" not in module.log()
    # Still serving.
    module.send("LIST VOICES\n")
    assert module.expect(200).text == "OK VOICE LIST SENT"


def test_a_megabyte_of_text_is_taken_and_can_be_stopped(module: ModulePipe) -> None:
    words = ("lorem ipsum dolor sit amet. " * 40000)[: 1 << 20]
    module.set()
    module.speak("<speak>" + words + "</speak>")
    module.expect(701)
    module.expect(705, timeout=60)
    module.send("STOP\n")
    events = module.events_until_end(timeout=30)
    assert events[-1].code == 703
    assert module.quiet(0.5) == []


def test_a_megabyte_on_one_line_of_char_is_refused_or_spoken(module: ModulePipe) -> None:
    module.speak_cmd(b"x" * (1 << 20), "CHAR")
    module.expect(202, timeout=60)
    r = module.reply(timeout=60)
    assert r.code == 200
    module.send("STOP\n")
    assert module.events_until_end(timeout=60)[-1].code in (702, 703)


def test_lost_daemon_ends_the_message_and_the_next_speak_reconnects(
    daemon_factory: DaemonFactory, tmp_path: Path
) -> None:
    link = tmp_path / "ttsd.sock"
    first: Daemon = daemon_factory()
    os.symlink(first.socket, link)
    pipe = ModulePipe(str(link), tmp_path)
    try:
        pipe.init()
        pipe.set()
        pipe.speak(" ".join(["A long message that keeps going."] * 40))
        pipe.expect(701)
        pipe.expect(705)
        first.stop(signal.SIGKILL)
        assert pipe.events_until_end(timeout=30)[-1].code in (702, 703)
        assert "lost ttsd" in pipe.log() or pipe.seen[-1].code == 702
        # ttsd down: the message ends at once instead of hanging.
        pipe.set()
        pipe.speak("Anyone there?")
        assert pipe.events_until_end(timeout=30)[-1].code == 703
        second = daemon_factory()
        link.unlink()
        os.symlink(second.socket, link)
        time.sleep(0.1)
        pipe.set()
        pipe.speak("Back again.")
        events = pipe.events_until_end(timeout=60)
        assert events[-1].code == 702
        assert any(r.code == 705 for r in events)
    finally:
        pipe.quit()
