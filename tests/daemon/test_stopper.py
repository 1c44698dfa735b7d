"""The daemon's signals and stop (appliance.stopper), with real signals sent to this
process and no daemon: a signal during start-up interrupts it at once, a SIGHUP then is
kept for when it serves; once serving, the drain notice comes first where a balancer reads
the box, and a second signal cuts it short."""

from __future__ import annotations

import asyncio
import os
import signal

from appliance.ops.config import parse_config
from appliance.ops.notify import Notifier
from appliance.stopper import Stopper, drain_notice_s


class Log:
    def __init__(self) -> None:
        self.said: list[str] = []

    def halt(self) -> None:
        self.said.append("halt")

    def give_notice(self) -> None:
        self.said.append("notice")

    def reload(self) -> None:
        self.said.append("reload")


def _stopper(log: Log, notice_s: float) -> Stopper:
    return Stopper(Notifier.disabled(), log.halt, lambda: notice_s, log.give_notice)


def test_a_signal_during_start_up_interrupts_and_a_sighup_waits_for_serving() -> None:
    async def scenario() -> tuple[Stopper, Log]:
        log = Log()
        stopper = _stopper(log, notice_s=5.0)
        stopper.install()
        os.kill(os.getpid(), signal.SIGHUP)
        await asyncio.sleep(0.05)
        assert log.said == []  # kept, not run, not the default action (ending us)
        stopper.serving(log.reload)
        assert log.said == ["reload"]
        os.kill(os.getpid(), signal.SIGTERM)  # before READY=1: no notice, at once
        await asyncio.wait_for(stopper.stopped.wait(), 5)
        return stopper, log

    stopper, log = asyncio.run(scenario())
    assert stopper.interrupted == signal.SIGTERM
    assert log.said == ["reload", "halt"]


def test_once_serving_the_notice_comes_first_and_a_second_signal_cuts_it_short() -> None:
    async def scenario() -> tuple[Stopper, Log, float]:
        log = Log()
        stopper = _stopper(log, notice_s=30.0)
        stopper.ready = True
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        stopper.request_stop()
        await asyncio.sleep(0.05)
        assert log.said == ["notice"] and not stopper.stopped.is_set()
        stopper.request_stop()  # the second SIGTERM
        await asyncio.wait_for(stopper.stopped.wait(), 5)
        return stopper, log, loop.time() - t0

    stopper, log, took = asyncio.run(scenario())
    assert stopper.interrupted is None
    assert log.said == ["notice", "halt"] and took < 10.0


def test_until_stopped_leaves_work_running_when_a_stop_comes_first() -> None:
    async def scenario() -> tuple[object, object, bool]:
        stopper = _stopper(Log(), notice_s=0.0)
        done = asyncio.get_running_loop().create_future()
        done.set_result(42)
        first = await stopper.until_stopped(done)
        never: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_later(0.05, stopper.request_stop)
        second = await stopper.until_stopped(never)
        left = not never.done()
        never.cancel()
        return first, second, left

    assert asyncio.run(scenario()) == (42, None, True)


def test_the_notice_applies_only_where_a_balancer_reads_the_box() -> None:
    plain = parse_config({"limits": {"drain_notice_s": 4.0}})
    http = parse_config({"limits": {"drain_notice_s": 4.0}, "http": {"listen": "127.0.0.1:0"}})
    assert drain_notice_s(plain) == 0.0
    assert drain_notice_s(http) == 4.0
