"""The lineup without a device: the state gate, endings counted once, a client's stop."""

from __future__ import annotations

import pytest

from appliance.playback.lineup import Lineup, NoAudioDevice


def test_requests_wait_for_ok_and_say_why() -> None:
    lineup = Lineup()
    with pytest.raises(NoAudioDevice, match="not opened"):
        lineup.submit("message", 1.0, 22050, 22050, "c")
    lineup.set_state("ok", "")
    with pytest.raises(NoAudioDevice, match="playback is off"):
        lineup.submit("message", 1.0, 22050, None, "c")  # ok, but no stream yet
    with pytest.raises(ValueError):
        lineup.submit("message", 2.5, 22050, 22050, "c")
    with pytest.raises(ValueError):
        lineup.submit("shout", 1.0, 22050, 22050, "c")


def test_stop_ends_a_clients_waiting_ones_and_cuts_its_speaking_one() -> None:
    lineup = Lineup()
    lineup.set_state("ok", "")
    first = lineup.submit("message", 1.0, 22050, 22050, "a")
    assert lineup.take_next() is first and lineup.playing is first
    waiting = lineup.submit("message", 1.0, 22050, 22050, "a")
    other = lineup.submit("message", 1.0, 22050, 22050, "b")
    assert waiting.position == 0 and other.position == 1
    assert lineup.stop("a") == 2
    assert first._cut_reason == "cancelled" and first.end_info is None  # the callback fades it
    assert waiting.end_info is not None and waiting.end_info.reason == "cancelled"
    assert other.end_info is None


def test_end_all_ends_queued_and_held_once_and_counts_them() -> None:
    lineup = Lineup()
    lineup.set_state("ok", "")
    held = lineup.submit("message", 1.0, 22050, 22050, "a")
    lineup.take_next()
    queued = lineup.submit("message", 1.0, 22050, 22050, "b")
    dropped = lineup.submit("notification", 1.0, 22050, 22050, "c")  # something speaks
    assert dropped.end_info is not None and dropped.end_info.reason == "dropped"
    lineup.end_all("device_lost")
    for utt in (held, queued):
        assert utt.end_info is not None and utt.end_info.reason == "device_lost"
    lineup.end(held, "done")  # a late event from the callback changes nothing
    assert held.end_info is not None and held.end_info.reason == "device_lost"
    counts = lineup.counts()
    assert (counts["interrupted"], counts["dropped"], counts["played"]) == (2, 1, 0)
    assert counts["queued"] == 0 and counts["speaking"] is False
    assert lineup.playing is None
