"""speech-dispatcher's priority rules, without audio."""

from __future__ import annotations

import pytest

from appliance.playback.queue import Admission, Priority, SpeechQueue


class Msg:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


def speak(q: SpeechQueue[Msg], name: str, prio: str) -> tuple[Msg, Admission[Msg]]:
    m = Msg(name)
    return m, q.submit(m, prio)


def order(q: SpeechQueue[Msg]) -> list[str]:
    return [m.name for m in q.waiting()]


def test_idle_message_plays_next_and_messages_queue_in_order() -> None:
    q: SpeechQueue[Msg] = SpeechQueue()
    a, adm = speak(q, "a", "message")
    assert adm.accepted and adm.position == 0 and adm.cut is None
    assert q.next() is a
    _, adm_b = speak(q, "b", "message")
    _, adm_c = speak(q, "c", "message")
    assert adm_b.cut is None and adm_c.position == 1
    assert order(q) == ["b", "c"]


def test_important_goes_ahead_and_cuts_a_speaking_non_important() -> None:
    q: SpeechQueue[Msg] = SpeechQueue()
    a, _ = speak(q, "a", "message")
    q.next()
    speak(q, "b", "message")
    speak(q, "n", "text")
    i, adm = speak(q, "i", "important")
    assert adm.cut is a and adm.position == 0
    assert order(q) == ["i", "b", "n"]  # message and text postponed, not dropped
    assert q.next() is i


def test_important_is_never_interrupted_and_importants_queue() -> None:
    q: SpeechQueue[Msg] = SpeechQueue()
    i1, _ = speak(q, "i1", "important")
    q.next()
    for name, prio in [("i2", "important"), ("m", "message"), ("t", "text")]:
        _, adm = speak(q, name, prio)
        assert adm.cut is None
    assert q.current is i1
    assert order(q) == ["i2", "m", "t"]


def test_important_drops_waiting_notification_and_progress() -> None:
    q: SpeechQueue[Msg] = SpeechQueue()
    n, _ = speak(q, "n", "notification")
    _, adm = speak(q, "i", "important")
    assert adm.dropped == [n]


def test_text_is_cut_by_newer_text_and_by_message() -> None:
    q: SpeechQueue[Msg] = SpeechQueue()
    t1, _ = speak(q, "t1", "text")
    q.next()
    t2, adm = speak(q, "t2", "text")
    assert adm.cut is t1
    q.next()
    _, adm = speak(q, "m", "message")
    assert adm.cut is t2


def test_only_the_newest_waiting_text_survives_and_message_drops_waiting_text() -> None:
    q: SpeechQueue[Msg] = SpeechQueue()
    speak(q, "i", "important")
    q.next()
    t1, _ = speak(q, "t1", "text")
    t2, adm = speak(q, "t2", "text")
    assert adm.dropped == [t1]
    _, adm = speak(q, "m", "message")
    assert adm.dropped == [t2]
    assert order(q) == ["m"]


def test_text_waits_behind_message_and_does_not_cut_it() -> None:
    q: SpeechQueue[Msg] = SpeechQueue()
    speak(q, "m1", "message")
    q.next()
    speak(q, "m2", "message")
    _, adm = speak(q, "t", "text")
    assert adm.cut is None and adm.position == 1


def test_message_does_not_cut_message() -> None:
    q: SpeechQueue[Msg] = SpeechQueue()
    m1, _ = speak(q, "m1", "message")
    q.next()
    _, adm = speak(q, "m2", "message")
    assert adm.cut is None and q.current is m1


@pytest.mark.parametrize("busy", ["important", "message", "text", "progress"])
def test_notification_dropped_while_anything_else_speaks(busy: str) -> None:
    q: SpeechQueue[Msg] = SpeechQueue()
    speak(q, "b", busy)
    q.next()
    _, adm = speak(q, "n", "notification")
    assert not adm.accepted and adm.position == -1


@pytest.mark.parametrize("waiting", ["important", "message", "text", "progress"])
def test_notification_dropped_while_anything_else_waits(waiting: str) -> None:
    q: SpeechQueue[Msg] = SpeechQueue()
    speak(q, "w", waiting)
    _, adm = speak(q, "n", "notification")
    assert not adm.accepted


def test_newer_notification_cuts_older_one() -> None:
    q: SpeechQueue[Msg] = SpeechQueue()
    n1, _ = speak(q, "n1", "notification")
    q.next()
    n2, adm = speak(q, "n2", "notification")
    assert adm.accepted and adm.cut is n1
    assert q.next() is n2


def test_notification_is_cut_by_everything_else() -> None:
    for prio in ("important", "message", "text", "progress"):
        q: SpeechQueue[Msg] = SpeechQueue()
        n, _ = speak(q, "n", "notification")
        q.next()
        _, adm = speak(q, "x", prio)
        assert adm.cut is n, prio


def test_progress_series_last_one_is_always_spoken() -> None:
    q: SpeechQueue[Msg] = SpeechQueue()
    p1, adm = speak(q, "10%", "progress")
    assert adm.position == 0 and not adm.held
    assert q.next() is p1
    p2, adm2 = speak(q, "50%", "progress")
    assert adm2.accepted and adm2.held and adm2.cut is None
    p3, adm3 = speak(q, "100%", "progress")
    assert adm3.held and adm3.dropped == [p2]
    q.finished(p1)
    assert q.next() is p3
    assert q.current_priority is Priority.PROGRESS


def test_held_progress_waits_behind_messages_and_survives_them() -> None:
    q: SpeechQueue[Msg] = SpeechQueue()
    speak(q, "m", "message")
    q.next()
    p, adm = speak(q, "p", "progress")
    assert adm.held
    speak(q, "i", "important")
    speak(q, "t", "text")
    assert order(q) == ["i", "t", "p"]
    assert q.position(p) == 2


def test_remove_and_remove_where_and_clear() -> None:
    q: SpeechQueue[Msg] = SpeechQueue()
    a, _ = speak(q, "a", "message")
    b, _ = speak(q, "b", "message")
    q.next()
    p, _ = speak(q, "p", "progress")
    assert q.remove(b) and not q.remove(b)
    assert q.remove_where(lambda m: m.name == "p") == [p]
    assert q.clear() == [a] and q.current is None and len(q) == 0


def test_unknown_priority_is_rejected() -> None:
    q: SpeechQueue[Msg] = SpeechQueue()
    with pytest.raises(ValueError):
        q.submit(Msg("x"), "urgent")


@pytest.mark.parametrize("speaking", [None, *Priority])
@pytest.mark.parametrize("waiting", [None, *Priority])
@pytest.mark.parametrize("arriving", list(Priority))
def test_cuts_answers_what_submit_then_does(
    speaking: Priority | None, waiting: Priority | None, arriving: Priority
) -> None:
    """The service asks ``cuts`` before admission (a speak that cuts what is speaking
    takes its place): the answer must be what the arrival then does."""
    q: SpeechQueue[Msg] = SpeechQueue()
    if speaking is not None:
        speak(q, "speaking", speaking)
        q.next()
    if waiting is not None:
        speak(q, "waiting", waiting)
    before = (q.current, order(q))
    predicted = q.cuts(arriving)
    assert (q.current, order(q)) == before  # a question only
    _, adm = speak(q, "arriving", arriving)
    assert predicted == (adm.cut is not None)
    assert adm.cut is None or adm.cut.name == "speaking"
