"""Log format for journald (priority prefixes, no timestamps) and for a terminal."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys

import pytest

from appliance.ops.logsetup import JournalFormatter, set_level, stream_is_journal
from tests.conftest import REPO

CHILD = r"""
import logging, sys
from appliance.ops.logsetup import configure_logging, set_level
configure_logging(sys.argv[1])
log = logging.getLogger("ttsd.test")
log.debug("detail")
log.info("served one")
log.warning("careful")
log.error("broken")
set_level("error")
log.warning("hidden after set_level")
log.error("still shown")
"""


def _record(level: int, msg: str) -> logging.LogRecord:
    return logging.LogRecord("ttsd", level, __file__, 1, msg, None, None)


@pytest.mark.parametrize(
    ("level", "prefix"),
    [
        (logging.DEBUG, "<7>"),
        (logging.INFO, "<6>"),
        (logging.WARNING, "<4>"),
        (logging.ERROR, "<3>"),
        (logging.CRITICAL, "<2>"),
    ],
)
def test_journal_lines_carry_the_syslog_priority(level: int, prefix: str) -> None:
    assert JournalFormatter().format(_record(level, "hello")) == f"{prefix}ttsd: hello"


def test_every_line_of_a_traceback_keeps_the_priority() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        rec = logging.LogRecord("ttsd", logging.ERROR, __file__, 1, "failed", None, sys.exc_info())
    lines = JournalFormatter().format(rec).split("\n")
    assert len(lines) > 3
    assert all(line.startswith("<3>") for line in lines)
    assert lines[-1] == "<3>RuntimeError: boom"


def test_journal_stream_must_be_our_stderr() -> None:
    r, w = os.pipe()
    try:
        with os.fdopen(w, "w", closefd=False) as stream:
            st = os.fstat(w)
            assert stream_is_journal(stream, {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"})
            assert not stream_is_journal(stream, {"JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino + 1}"})
            assert not stream_is_journal(stream, {"JOURNAL_STREAM": "garbage"})
            assert not stream_is_journal(stream, {})
    finally:
        os.close(r)
        os.close(w)


def _run_child(level: str, journal: bool) -> list[str]:
    r, w = os.pipe()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("JOURNAL_STREAM", None)
    if journal:
        st = os.fstat(w)
        env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
    proc = subprocess.Popen([sys.executable, "-c", CHILD, level], stderr=w, env=env)
    os.close(w)
    with os.fdopen(r) as out:
        text = out.read()
    assert proc.wait(timeout=30) == 0, text
    return text.splitlines()


def test_under_journald_no_timestamps_and_priority_prefixes() -> None:
    assert _run_child("debug", journal=True) == [
        "<7>ttsd.test: detail",
        "<6>ttsd.test: served one",
        "<4>ttsd.test: careful",
        "<3>ttsd.test: broken",
        "<3>ttsd.test: still shown",
    ]


def test_on_a_terminal_lines_are_timestamped_and_level_filtered() -> None:
    lines = _run_child("info", journal=False)
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"
    assert len(lines) == 4
    assert re.fullmatch(stamp + r" INFO    ttsd\.test: served one", lines[0])
    assert re.fullmatch(stamp + r" WARNING ttsd\.test: careful", lines[1])
    assert re.fullmatch(stamp + r" ERROR   ttsd\.test: broken", lines[2])
    assert lines[3].endswith("ERROR   ttsd.test: still shown")


def test_unknown_level_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown log level 'loud'"):
        set_level("loud")
