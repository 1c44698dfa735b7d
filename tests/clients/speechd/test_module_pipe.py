"""sd_ttsd driven through a pipe exactly as speech-dispatcher 0.11 drives a module,
against the real daemon."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from tests.clients.speechd.modpipe import ENDINGS, ModulePipe, audio_of
from tests.conftest import Daemon

LONG = " ".join(
    f"This is sentence number {i} of a message that goes on for a while." for i in range(12)
)


def codes(events: list) -> list[int]:
    return [r.code for r in events]


def test_init_reports_the_daemon_and_its_voices(daemon: Daemon, tmp_path: Path) -> None:
    pipe = ModulePipe(daemon.socket, tmp_path)
    try:
        r = pipe.init()
        assert r.text == "OK LOADED SUCCESSFULLY"
        assert "en_US-joe-medium" in r.data[0]
        pipe.send("LIST VOICES\n")
        voices = pipe.expect(200)
        assert voices.text == "OK VOICE LIST SENT"
        assert "en_US-joe-medium\ten-US\tnone" in voices.data
    finally:
        assert pipe.quit() == 0


def test_audio_other_than_server_is_refused_with_a_reason(module: ModulePipe) -> None:
    module.send("AUDIO\naudio_output_method=pulse\naudio_pulse_device=default\n.\n")
    module.expect(207)
    r = module.expect(300)
    assert r.text == "MODULE ERROR"
    assert "server" in r.data[0]


def test_speak_streams_audio_blocks_and_ends(module: ModulePipe) -> None:
    module.set()
    module.speak("<speak>Hello there, this is ttsd.</speak>")
    events = module.events_until_end()
    assert events[0].code == 701
    assert events[-1].code == 702
    assert set(codes(events[1:-1])) == {705}
    assert {r.sample_rate for r in events if r.code == 705} == {22050}
    audio = audio_of(events)
    assert len(audio) > 0.5 * 22050
    assert np.abs(audio).max() > 0.05
    assert module.quiet(0.3) == []


def test_marks_come_in_order_between_the_audio(module: ModulePipe) -> None:
    module.set()
    module.speak(
        '<speak>One apple.<mark name="__spd_1"/> Two pears.<mark name="mine"/> Three plums.</speak>'
    )
    events = module.events_until_end()
    assert events[-1].code == 702
    marks = [(i, r.data[0]) for i, r in enumerate(events) if r.code == 700]
    assert [name for _, name in marks] == ["__spd_1", "mine"]
    (first, _), (second, _) = marks
    # Audio before the first mark, between the marks and after the second.
    assert 705 in codes(events[:first])
    assert 705 in codes(events[first:second])
    assert 705 in codes(events[second:])


def test_stop_answers_703_at_once_and_no_audio_follows(module: ModulePipe) -> None:
    module.set()
    module.speak(LONG)
    assert module.expect(701)
    assert module.expect(705)
    module.send("STOP\n")
    rest = module.events_until_end(timeout=10)
    assert rest[-1].code == 703
    assert module.quiet(1.0) == []  # nothing after 703: no audio, no second ending
    # The next message is spoken normally.
    module.set()
    module.speak("Next.")
    assert codes(module.events_until_end())[-1] == 702


def test_stop_cancels_the_ttsd_request(module: ModulePipe, daemon: Daemon) -> None:
    from appliance.clients.client import Client

    def cancelled() -> int:
        with Client(daemon.socket) as c:
            return int(c.stats()["counters"].get("requests_cancelled", 0))

    before = cancelled()
    module.set()
    # One long sentence: one ttsd request, still streaming when STOP comes.
    module.speak("<speak>" + LONG.replace(".", ",") + "</speak>")
    module.expect(701)
    module.expect(705)
    module.send("STOP\n")
    assert module.events_until_end(timeout=10)[-1].code == 703
    deadline = time.monotonic() + 20
    while cancelled() == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cancelled() > before


def test_stop_before_the_first_audio(module: ModulePipe) -> None:
    module.set()
    module.speak_cmd(LONG)
    module.send("STOP\n")
    module.expect(202)
    module.expect(200)
    events = module.events_until_end(timeout=10)
    assert events[-1].code == 703
    assert module.quiet(1.0) == []


def test_every_message_begins_before_it_ends(module: ModulePipe) -> None:
    """150 × SPEAK, STOP in one write: the STOP (or the next SPEAK) came before each
    message's task had started, and the module sent 150 endings and no 701 BEGIN."""
    module.set()
    for i in range(150):
        module.speak_cmd(f"Message number {i} goes on for a while.")
        module.send("STOP\n")
    got: list[int] = []
    while got.count(703) + got.count(702) < 150:
        got.append(module.reply(timeout=60).code)
    assert got.count(701) == 150, got[:20]
    begun = False
    for code in got:
        if code == 701:
            assert not begun, got[:40]
            begun = True
        elif code in ENDINGS:
            assert begun, got[:40]  # speech-dispatcher waits for BEGIN before the end
            begun = False
    assert module.quiet(1.0) == []


def test_stop_when_idle_says_nothing(module: ModulePipe) -> None:
    module.send("STOP\n")
    module.send("PAUSE\n")
    assert module.quiet(0.5) == []


def test_a_new_speak_while_speaking_ends_the_old_one_first(module: ModulePipe) -> None:
    module.set()
    module.speak(LONG)
    module.expect(701)
    module.expect(705)
    module.speak_cmd("Second message.")
    got = []
    while True:
        r = module.reply()
        got.append(r.code)
        if r.code == 702:
            break
    # The old message ends (703) before the new one's first reply; no audio in between.
    i_stop = got.index(703)
    assert got[i_stop + 1 : i_stop + 4] == [202, 200, 701]
    assert module.quiet(0.5) == []


def test_pause_stops_at_the_next_mark(module: ModulePipe) -> None:
    module.set()
    module.speak("<speak>" + LONG[:200] + '<mark name="__spd_1"/>' + LONG[200:400] + "</speak>")
    module.expect(701)
    module.expect(705)
    module.send("PAUSE\n")
    events = module.events_until_end()
    assert events[-1].code == 704
    assert events[-2].code == 700 and events[-2].data == ["__spd_1"]
    assert module.quiet(0.5) == []


def test_rate_changes_the_audio_length(module: ModulePipe) -> None:
    lengths = {}
    for rate in (0, 100, -100):
        module.set(rate=rate)
        module.speak("The quick brown fox jumps over the lazy dog.")
        lengths[rate] = len(audio_of(module.events_until_end()))
    assert lengths[100] < 0.75 * lengths[0] < 0.75 * 0.75 * lengths[-100]


def test_volume_scales_the_audio(module: ModulePipe) -> None:
    peaks = {}
    for volume in (100, -50):
        module.set(volume=volume)
        module.speak("Volume check, one two three.")
        peaks[volume] = float(np.abs(audio_of(module.events_until_end())).max())
    assert 0.15 < peaks[-50] / peaks[100] < 0.4  # 0.25 of the voice's level


def test_set_rejects_bad_values_and_syntax(module: ModulePipe) -> None:
    module.send("SET\nrate=500\n.\n")
    module.expect(203)
    module.expect(303)
    module.send("SET\nrate=abc\n.\n")
    module.expect(203)
    module.expect(303)
    module.send("SET\nno equals sign\n.\n")
    module.expect(203)
    module.expect(302)
    module.send("SET\nsomething_new=1\n.\n")  # a newer server's setting: accepted, unused
    module.expect(203)
    module.expect(203)


def test_unknown_voice_settings_fall_back_to_a_voice_that_exists(module: ModulePipe) -> None:
    module.set(synthesis_voice="no-such-voice", language="xx", voice="CHILD_FEMALE")
    module.speak("Still speaking.")
    assert codes(module.events_until_end())[-1] == 702


def test_char_and_key_are_spoken(module: ModulePipe) -> None:
    module.set()
    for command, body in (
        ("CHAR", "a"),
        ("CHAR", "space"),
        ("CHAR", "?"),
        ("KEY", "shift_a"),
        ("KEY", "kp-enter"),
        ("KEY", "Return"),
    ):
        module.speak(body, command)
        events = module.events_until_end()
        assert events[-1].code == 702, (command, body)
        assert 705 in codes(events), (command, body)


def test_char_with_two_lines_is_refused(module: ModulePipe) -> None:
    module.speak_cmd("a\nb", "CHAR")
    module.expect(202)
    module.expect(305)


def test_empty_speak_is_refused(module: ModulePipe) -> None:
    module.speak_cmd("", "SPEAK")
    module.expect(202)
    module.expect(301)


def test_sound_icon_goes_back_to_the_server(module: ModulePipe) -> None:
    module.speak("message", "SOUND_ICON")
    events = module.events_until_end()
    assert codes(events) == [701, 706, 702]
    assert events[1].data == ["message"]


def test_unknown_command(module: ModulePipe) -> None:
    module.send("FROBNICATE\n")
    module.expect(300)


def test_dot_stuffed_lines_are_unstuffed(module: ModulePipe) -> None:
    module.set()
    module.speak(".hidden file\n..and more")
    assert codes(module.events_until_end())[-1] == 702


def test_ttsd_not_running_fails_init_clearly(tmp_path: Path) -> None:
    missing = str(tmp_path / "nobody-here.sock")
    pipe = ModulePipe(missing, tmp_path)
    pipe.send("INIT\n")
    r = pipe.expect(399)
    assert r.text == "ERR CANT INIT MODULE"
    assert "ttsd is not running" in r.data[0] and missing in r.data[0]
    assert pipe.proc.wait(timeout=10) == 1


def test_first_line_must_be_init(tmp_path: Path, daemon: Daemon) -> None:
    pipe = ModulePipe(daemon.socket, tmp_path)
    pipe.send("SPEAK\n")
    assert pipe.proc.wait(timeout=10) == 3


def test_every_ending_is_one_of_the_three(module: ModulePipe) -> None:
    assert ENDINGS == (702, 703, 704)


def test_ssml_goes_to_ttsd_as_ssml_when_it_takes_it(module: ModulePipe, daemon: Daemon) -> None:
    """With a daemon that parses SSML the markup takes effect (x-slow prosody is longer);
    with one that does not, the module says so in its log and speaks the text itself."""
    from appliance.clients.client import Client, TtsdError

    with Client(daemon.socket) as c:
        try:
            c.synthesize_all("<speak>probe</speak>", text_format="ssml")
            takes_ssml = True
        except TtsdError as exc:
            assert exc.code == "bad_request" and "text_format" in exc.message
            takes_ssml = False
    lengths = {}
    for name, body in (
        ("plain", "<speak>The quick brown fox jumps over the lazy dog.</speak>"),
        (
            "slow",
            '<speak><prosody rate="x-slow">The quick brown fox jumps over the lazy dog.'
            "</prosody></speak>",
        ),
    ):
        module.set()
        module.speak(body)
        events = module.events_until_end()
        assert events[-1].code == 702
        lengths[name] = len(audio_of(events))
    if takes_ssml:
        assert lengths["slow"] > 1.4 * lengths["plain"], lengths
        assert "takes no SSML" not in module.log()
    else:
        assert "takes no SSML" in module.log()
        assert 0.8 < lengths["slow"] / lengths["plain"] < 1.25, lengths


def test_a_phrase_sounds_the_same_every_time(module: ModulePipe) -> None:
    """sd_ttsd asks for deterministic noise by default (TtsdDeterministic): a screen
    reader's repeated phrase is the same audio each time."""
    module.set()
    takes = []
    for _ in range(2):
        module.speak("File menu.")
        takes.append(audio_of(module.events_until_end()))
    assert takes[0].tobytes() == takes[1].tobytes()
