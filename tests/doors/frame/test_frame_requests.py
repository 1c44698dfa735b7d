"""How a request ends (settle: the one table every door's requests go through) and the
text a request holds before its stream opens; no socket, no core."""

from __future__ import annotations

import logging

import pytest

from appliance.doors.frame.ending import Done, Failed, Lost, Report, settle
from appliance.doors.frame.requests import EarlyText, Request
from appliance.doors.net import ClientTooSlow
from appliance.errors import ErrorCode, ServiceError
from tests.doors.frame.memory import Counts


def _report() -> tuple[Report, Counts]:
    counts = Counts()
    return Report(counts, logging.getLogger("tests.doors.frame"), "test"), counts


async def _raises(exc: BaseException) -> None:
    raise exc


async def _returns() -> str:
    return "the end"


async def test_settle_turns_what_a_body_raises_into_one_ending(
    caplog: pytest.LogCaptureFixture,
) -> None:
    report, counts = _report()
    refused = ServiceError(ErrorCode.BAD_REQUEST, "no such voice")
    assert await settle(_returns(), report, "op") == Done("the end")
    assert await settle(_raises(refused), report, "op") == Failed(refused)
    assert await settle(_raises(ClientTooSlow()), report, "op") == Lost(too_slow=True)
    assert await settle(_raises(BrokenPipeError()), report, "op") == Lost()
    assert counts.codes == []  # the core counted its own errors; no one to tell the rest
    with caplog.at_level(logging.ERROR):
        bug = await settle(_raises(KeyError("x")), report, "synthesize", "connection 7")
    assert isinstance(bug, Failed) and bug.error.code == ErrorCode.INTERNAL
    assert counts.codes == [ErrorCode.INTERNAL]
    assert "connection 7: synthesize failed (KeyError): it ends with internal" in caplog.text


def test_early_text_is_bounded_and_ends_with_text_too_long() -> None:
    early = EarlyText(limit=10)
    early.add("Hello ")
    early.add("wide world.")  # 17 characters: over the limit, nothing of it is kept
    assert early.error is not None and early.error.code == ErrorCode.TEXT_TOO_LONG
    assert early.chars == 6
    early.add("more")  # dropped: it ends with text_too_long once open
    assert early.chars == 6


def test_text_after_finish_is_refused() -> None:
    req = Request("s1", "synthesize", text_limit=100)
    req.add_text("Hello.")
    req.finish()
    assert req.takes_text is False
    with pytest.raises(ServiceError):
        req.add_text("more")
    with pytest.raises(ServiceError):
        req.finish()
    req.end_text()  # the client half-closed: nothing more to end, and no error


def test_a_refused_request_drops_what_still_comes_for_it() -> None:
    req = Request("s2", "synthesize", text_limit=100)
    req.fail(ServiceError(ErrorCode.BAD_REQUEST, "a bad chunk"))
    assert req.refused is not None and not req.takes_text
    req.add_text("dropped")
    req.finish()
    assert req.early is not None and req.early.chars == 0


def test_a_request_that_is_no_text_stream_takes_no_text() -> None:
    req = Request("s3", "synthesize")
    assert not req.takes_text
    with pytest.raises(ServiceError):
        req.add_text("no")


def test_a_cancel_before_the_stream_opens_is_kept_for_it() -> None:
    req = Request("s4", "synthesize")
    req.cancel("disconnect")
    req.cancel("later")
    assert req.cancel_reason == "disconnect"
