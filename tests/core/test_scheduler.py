"""The EDF scheduler with real worker threads: order, decode-ahead, newcomers, cancels."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import AsyncIterator, Callable

import pytest

from appliance.core.scheduler import Scheduler, WorkTiming
from appliance.model.engine.interrupt import Interrupted, current
from appliance.ops.cpuwait import RunQueueWait
from tests.fakes.work import Blocking, run_blocking, running_scheduler, started


async def until(pred: Callable[[], bool]) -> None:
    """Wait up to a second for ``pred`` (the workers act on their own threads)."""
    for _ in range(100):
        if pred():
            return
        await asyncio.sleep(0.01)


@pytest.fixture
async def two_workers() -> AsyncIterator[Scheduler]:
    with running_scheduler(2) as s:
        yield s


@pytest.fixture
async def one_worker() -> AsyncIterator[Scheduler]:
    with running_scheduler(1) as s:
        yield s


async def test_due_work_runs_earliest_deadline_first_batch_last(one_worker: Scheduler) -> None:
    s = one_worker
    gate = Blocking()
    order: list[str] = []
    now = time.monotonic()
    first = s.submit(gate, deadline=now - 10, realtime=True, owner=1, kind="t")
    await started(gate)
    futs = [
        s.submit(
            lambda: order.append("batch"), deadline=now - 9, realtime=False, owner=2, kind="t"
        ),
        s.submit(lambda: order.append("late"), deadline=now - 1, realtime=True, owner=3, kind="t"),
        s.submit(
            lambda: order.append("later"), deadline=now - 0.5, realtime=True, owner=4, kind="t"
        ),
        s.submit(
            lambda: order.append("earliest"), deadline=now - 5, realtime=True, owner=5, kind="t"
        ),
    ]
    gate.finish.set()
    await asyncio.wait_for(asyncio.gather(first, *futs), 5)
    assert order == ["earliest", "late", "later", "batch"]
    assert s.depth() == 0


async def test_work_ahead_never_takes_the_last_free_worker(two_workers: Scheduler) -> None:
    s = two_workers
    ahead = [Blocking(), Blocking()]
    later = time.monotonic() + 100
    futs = [
        s.submit(w, deadline=later, realtime=True, owner=k, kind="t") for k, w in enumerate(ahead)
    ]
    await started(ahead[0])
    await asyncio.sleep(0.05)
    assert not ahead[1].started.is_set()  # the second worker stays free for due work
    due = s.submit(lambda: "due", deadline=time.monotonic(), realtime=True, owner=9, kind="t")
    assert (await asyncio.wait_for(due, 5))[0] == "due"
    for w in ahead:
        w.finish.set()
    await asyncio.wait_for(asyncio.gather(*futs), 5)
    assert s.snapshot()["ahead_runs"] == 2


async def test_a_newcomer_stops_work_ahead_which_runs_again_after(two_workers: Scheduler) -> None:
    s = two_workers
    ahead, ahead_fut = await run_blocking(s, time.monotonic() + 100, owner=1)
    first, first_fut = await run_blocking(s, time.monotonic(), owner=2, urgent=True)
    # Stopped and queued again; nothing ahead of time starts while the newcomer runs.
    await until(lambda: s.snapshot()["stopped_ahead"] == 1)
    assert s.snapshot()["stopped_ahead"] == 1
    await asyncio.sleep(0.05)
    assert ahead.runs == 1 and not ahead.started.is_set()
    assert s.depth() == 2
    first.finish.set()
    assert (await asyncio.wait_for(first_fut, 5))[0] == 1
    await started(ahead)  # the newcomer is served: the work ahead runs again
    ahead.finish.set()
    assert (await asyncio.wait_for(ahead_fut, 5))[0] == 2
    assert s.depth() == 0
    assert s.snapshot()["completed"] == 2


@pytest.mark.parametrize(("first_realtime", "stopped"), [(True, 1), (False, 0)])
async def test_due_work_stops_only_the_work_ahead_it_needs(
    two_workers: Scheduler, first_realtime: bool, stopped: int
) -> None:
    """A lone request's two items ahead hold both workers; its own due window stops one of
    them, not both: a batch item first, else the one started last (the least work lost)."""
    s = two_workers
    later = time.monotonic() + 60
    ahead = [Blocking(), Blocking()]
    futs = [
        s.submit(ahead[0], deadline=later, realtime=first_realtime, owner="me", kind="t"),
    ]
    await started(ahead[0])
    futs.append(s.submit(ahead[1], deadline=later, realtime=True, owner="me", kind="t"))
    await started(ahead[1])
    due = s.submit(lambda: "due", deadline=time.monotonic(), realtime=True, owner="me", kind="t")
    assert (await asyncio.wait_for(due, 5))[0] == "due"
    assert s.snapshot()["stopped_ahead"] == 1
    for w in ahead:
        w.finish.set()
    await asyncio.wait_for(asyncio.gather(*futs), 5)
    assert [w.runs for w in ahead] == [1 + (k == stopped) for k in range(2)]


async def test_due_work_is_not_stopped_for_a_newcomer(two_workers: Scheduler) -> None:
    s = two_workers
    due, due_fut = await run_blocking(s, time.monotonic(), owner=1)
    new = s.submit(
        lambda: "new", deadline=time.monotonic(), realtime=True, owner=2, kind="t", urgent=True
    )
    assert (await asyncio.wait_for(new, 5))[0] == "new"
    due.finish.set()
    assert (await asyncio.wait_for(due_fut, 5))[0] == 1
    assert s.snapshot()["stopped_ahead"] == 0


async def test_batch_requests_are_never_urgent(two_workers: Scheduler) -> None:
    s = two_workers
    ahead, ahead_fut = await run_blocking(s, time.monotonic() + 100, owner=1)
    batch = s.submit(
        lambda: "b", deadline=time.monotonic(), realtime=False, owner=2, kind="t", urgent=True
    )
    await asyncio.sleep(0.1)
    assert ahead.runs == 1 and ahead.started.is_set()
    assert not batch.done()  # batch work waits for the worker work ahead holds
    ahead.finish.set()
    await asyncio.wait_for(asyncio.gather(ahead_fut, batch), 5)
    assert s.snapshot()["stopped_ahead"] == 0


async def test_cancel_stops_the_running_item_and_drops_the_queued_ones(
    two_workers: Scheduler,
) -> None:
    s = two_workers
    owner = object()
    now = time.monotonic()
    due, due_fut = await run_blocking(s, now, owner)
    ahead, ahead_fut = await run_blocking(s, now + 100, owner)
    never = s.submit(lambda: "never", deadline=now + 200, realtime=True, owner=owner, kind="t")
    futs = [due_fut, ahead_fut, never]
    assert s.cancel_owner(owner) == 3
    await until(lambda: s.depth() == 0 and s.snapshot()["running"] == 0)
    assert s.depth() == 0 and s.snapshot()["running"] == 0
    assert due.runs == 1 and ahead.runs == 1  # stopped, not run again
    assert all(f.cancelled() for f in futs)
    assert s.snapshot()["stopped_ahead"] == 0 and s.snapshot()["completed"] == 0


async def queue_behind_a_gate(
    s: Scheduler, slack_s: float | None, windows: int = 1
) -> tuple[Blocking, list[str], list[asyncio.Future[tuple[None, WorkTiming]]]]:
    """A worker held by a gate; queued behind it, ``windows`` due windows (of as many
    streams) whose listeners have ``slack_s`` of audio in hand (None: none) and then a
    newcomer's first item."""
    gate, gate_fut = await run_blocking(s, time.monotonic(), owner="gate")
    order: list[str] = []
    now = time.monotonic()
    futs = [
        s.submit(
            lambda: order.append("window"),
            deadline=now - 0.3,
            realtime=True,
            owner=f"playing-{k}",
            kind="t",
            slack_until=None if slack_s is None else now + slack_s,
        )
        for k in range(windows)
    ]
    first = s.submit(
        lambda: order.append("first"),
        deadline=now,
        realtime=True,
        owner="new",
        kind="t",
        urgent=True,
    )
    return gate, order, [gate_fut, *futs, first]  # type: ignore[list-item]


async def test_a_newcomer_goes_ahead_of_due_work_whose_listener_has_audio_in_hand(
    one_worker: Scheduler,
) -> None:
    s = one_worker
    gate, order, futs = await queue_behind_a_gate(s, slack_s=10.0)
    gate.finish.set()
    await asyncio.wait_for(asyncio.gather(*futs), 5)
    assert order == ["first", "window"]
    assert s.snapshot()["newcomers_ahead"] == 1


@pytest.mark.parametrize("slack_s", [None, 0.0, 0.02])
async def test_due_work_whose_listener_is_about_to_run_dry_goes_first(
    one_worker: Scheduler, slack_s: float | None
) -> None:
    """No audio in hand, or less than a first item and the window take (50 ms each before
    one has run)."""
    s = one_worker
    gate, order, futs = await queue_behind_a_gate(s, slack_s=slack_s)
    gate.finish.set()
    await asyncio.wait_for(asyncio.gather(*futs), 5)
    assert order == ["window", "first"]
    assert s.snapshot()["newcomers_ahead"] == 0


@pytest.mark.parametrize(("windows", "goes_first"), [(1, "first"), (2, "window")])
async def test_a_newcomer_waits_unless_every_due_window_still_gets_in_after_it(
    one_worker: Scheduler, windows: int, goes_first: str
) -> None:
    """Due work runs one item after another behind a newcomer: 0.5 s in hand covers a
    0.2 s first item and one 0.2 s window, not two windows (each alone would fit; three
    newcomers of a burst went ahead of a second window that way, and it stalled)."""
    s = one_worker
    s.newcomers.first_item_s = s.newcomers.due_item_s = 0.2
    gate, order, futs = await queue_behind_a_gate(s, slack_s=0.5, windows=windows)
    gate.finish.set()
    await asyncio.wait_for(asyncio.gather(*futs), 5)
    assert order[0] == goes_first, order


async def test_first_items_teach_the_scheduler_how_long_they_take(one_worker: Scheduler) -> None:
    s = one_worker
    before = s.newcomers.first_item_s
    for _ in range(3):
        fut = s.submit(
            lambda: time.sleep(0.2),
            deadline=time.monotonic(),
            realtime=True,
            owner=1,
            kind="t",
            urgent=True,
        )
        await asyncio.wait_for(fut, 5)
    assert s.newcomers.first_item_s > before + 0.05  # 0.2 s runs pull the mean up from its prior
    fut = s.submit(
        lambda: time.sleep(0.3), deadline=time.monotonic(), realtime=True, owner=1, kind="t"
    )
    learned = s.newcomers.first_item_s
    await asyncio.wait_for(fut, 5)
    assert s.newcomers.first_item_s == learned  # other work does not count


async def test_a_worker_is_crowded_while_another_runs_due_work_or_due_work_waits(
    two_workers: Scheduler,
) -> None:
    s = two_workers
    seen: list[bool] = []

    def look() -> None:
        seen.append(s.crowded())

    async def looked() -> bool:
        fut = s.submit(look, deadline=time.monotonic(), realtime=True, owner="look", kind="t")
        await asyncio.wait_for(fut, 5)
        return seen[-1]

    assert not await looked()  # alone
    ahead, ahead_fut = await run_blocking(s, time.monotonic() + 100, owner=2)
    assert not await looked()  # work ahead of time steps aside: it crowds nobody
    ahead.finish.set()
    await asyncio.wait_for(ahead_fut, 5)
    due, due_fut = await run_blocking(s, time.monotonic(), owner=3)
    assert await looked()  # the other worker runs due work
    due.finish.set()
    await asyncio.wait_for(due_fut, 5)


async def test_a_lone_worker_is_crowded_while_due_work_waits(one_worker: Scheduler) -> None:
    s = one_worker
    seen: list[bool] = []
    gate, gate_fut = await run_blocking(s, time.monotonic(), owner=1)
    now = time.monotonic()
    futs = [
        s.submit(
            lambda: seen.append(s.crowded()), deadline=now - 2, realtime=True, owner=2, kind="t"
        ),
        s.submit(lambda: None, deadline=now - 1, realtime=True, owner=3, kind="t"),
    ]
    gate.finish.set()
    await asyncio.wait_for(asyncio.gather(gate_fut, *futs), 5)
    assert seen == [True]  # the second item was due and waiting
    await asyncio.wait_for(
        s.submit(lambda: seen.append(s.crowded()), deadline=now, realtime=True, owner=4, kind="t"),
        5,
    )
    assert seen == [True, False]


async def test_a_lone_stream_s_items_all_run_on_the_first_worker(two_workers: Scheduler) -> None:
    """The idle worker that comes first takes the next item, so a lone stream keeps one warm
    thread (a plain condition woke the one idle longest: the items went round the workers)."""
    s = two_workers
    names: list[str] = []
    for _ in range(8):
        await asyncio.wait_for(
            s.submit(
                lambda: names.append(threading.current_thread().name),
                deadline=time.monotonic(),
                realtime=True,
                owner=object(),
                kind="t",
            ),
            5,
        )
        # Both workers idle again before the next item (a fixed sleep is not enough on a
        # busy machine: worker 0 may still be on its way back to waiting).
        await until(lambda: len(s._idle) == 2)
    assert names == ["test-0"] * 8


async def test_work_submitted_together_still_runs_on_every_worker(two_workers: Scheduler) -> None:
    """Waking one worker per item must not leave the second item queued behind the first."""
    s = two_workers
    a, b = Blocking(), Blocking()
    now = time.monotonic()
    futs = [s.submit(w, deadline=now, realtime=True, owner=w, kind="t") for w in (a, b)]
    await started(a)
    await started(b)  # both run at once
    a.finish.set()
    b.finish.set()
    await asyncio.wait_for(asyncio.gather(*futs), 5)


async def test_each_worker_runs_on_the_cpu_it_was_given() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    given = (cpus[-1], cpus[0])  # reversed, so an unpinned worker cannot pass by chance
    s = Scheduler(2, name="pinned", cpus=given)
    s.start()
    try:
        a, b = Blocking(), Blocking()
        seen: dict[str, set[int]] = {}

        def where(work: Blocking) -> Callable[[], int]:
            def run() -> int:
                seen[threading.current_thread().name] = os.sched_getaffinity(0)
                return work()

            return run

        now = time.monotonic()
        futs = [s.submit(where(w), deadline=now, realtime=True, owner=w, kind="t") for w in (a, b)]
        await started(a)
        await started(b)
        a.finish.set()
        b.finish.set()
        await asyncio.wait_for(asyncio.gather(*futs), 5)
    finally:
        s.stop()
    assert seen == {"pinned-0": {given[0]}, "pinned-1": {given[1]}}
    assert os.sched_getaffinity(0) == set(cpus)  # the caller's own thread is untouched


@pytest.mark.parametrize("ahead", [True, False])
async def test_a_lone_requests_item_hands_a_part_to_the_idle_worker(
    two_workers: Scheduler, ahead: bool
) -> None:
    """All the work there is is one request's: half of its item runs on the other worker,
    at the same time (0.3 s + 0.3 s in ~0.3 s), whether it runs ahead of time or is due."""
    s = two_workers

    def item() -> tuple[int, int, float]:
        t0 = time.monotonic()
        part = s.beside(lambda: (time.sleep(0.3), threading.get_ident())[1])
        time.sleep(0.3)
        return threading.get_ident(), part(), time.monotonic() - t0

    deadline = time.monotonic() + (60 if ahead else 0)
    fut = s.submit(item, deadline=deadline, realtime=True, owner="lone", kind="t")
    (mine, theirs, took), _ = await asyncio.wait_for(fut, 5)
    assert mine != theirs
    assert took < 0.55


async def test_a_due_items_part_yields_its_worker_to_a_newcomer(two_workers: Scheduler) -> None:
    """A due item's part, running on the other worker, is stopped when another request's
    work comes: the newcomer runs on that worker at once, and the item runs the part
    itself (its result is still the part's)."""
    s = two_workers
    part_started, newcomer_ran = threading.Event(), threading.Event()

    def part() -> str:
        token = current()
        if token is None or threading.get_ident() == item_thread[0]:
            return "here"
        stopped = threading.Event()
        with token.hooked(stopped.set):
            part_started.set()
            if stopped.wait(5):
                raise Interrupted("stopped")
        return "there"

    item_thread: list[int] = []

    def item() -> tuple[str, bool]:
        item_thread.append(threading.get_ident())
        join = s.beside(part)
        part_started.wait(5)
        return join(), newcomer_ran.wait(5)

    fut = s.submit(item, deadline=time.monotonic(), realtime=True, owner="lone", kind="t")
    assert await asyncio.to_thread(part_started.wait, 5)
    newcomer = s.submit(
        newcomer_ran.set, deadline=time.monotonic(), realtime=True, owner="new", kind="t"
    )
    (result, ran), _ = await asyncio.wait_for(fut, 10)
    await asyncio.wait_for(newcomer, 5)
    assert (result, ran) == ("here", True)


async def test_with_every_worker_busy_only_a_part_that_may_wait_is_offered(
    two_workers: Scheduler,
) -> None:
    """Both workers run the request's items: a part that must start now is kept (its item
    runs it), one that may wait (a long flow) is queued, and the worker whose item ends
    first takes it."""
    s = two_workers
    gate, gate_fut = await run_blocking(s, time.monotonic() + 60, owner="me")

    def item() -> tuple[bool, int, int]:
        def part() -> int:
            return threading.get_ident()

        kept = s.beside(part) is part
        join = s.beside(part, wait=True)
        gate.finish.set()  # the other worker's item ends: it takes the part
        time.sleep(0.2)
        return kept, join(), threading.get_ident()

    fut = s.submit(item, deadline=time.monotonic() + 60, realtime=True, owner="me", kind="t")
    (kept, ran_on, mine), _ = await asyncio.wait_for(fut, 5)
    await asyncio.wait_for(gate_fut, 5)
    assert kept and ran_on != mine


async def test_due_work_goes_before_a_part_of_work_ahead(two_workers: Scheduler) -> None:
    """A worker coming free takes the request's due item before a part of its work ahead
    (the listener waits for the one; the other's item runs it itself if need be)."""
    s = two_workers
    gate, gate_fut = await run_blocking(s, time.monotonic() + 60, owner="me")
    offered, due_ran = threading.Event(), threading.Event()
    order: list[str] = []

    def due() -> None:
        order.append("due")
        due_ran.set()

    def item() -> None:
        join = s.beside(lambda: order.append("part"), wait=True)
        offered.set()
        due_ran.wait(5)
        join()

    fut = s.submit(item, deadline=time.monotonic() + 60, realtime=True, owner="me", kind="t")
    assert await asyncio.to_thread(offered.wait, 5)
    due_fut = s.submit(due, deadline=time.monotonic(), realtime=True, owner="me", kind="t")
    gate.finish.set()
    await asyncio.wait_for(asyncio.gather(fut, gate_fut, due_fut), 10)
    assert order == ["due", "part"]


async def test_no_part_is_offered_while_another_request_has_work() -> None:
    with running_scheduler(3) as s:
        gate, gate_fut = await run_blocking(s, time.monotonic(), owner="other")
        kept: list[bool] = []

        def item() -> None:
            def part() -> None:
                return None

            kept.append(s.beside(part) is part)  # handed back: this worker runs it

        fut = s.submit(item, deadline=time.monotonic() + 60, realtime=True, owner="me", kind="t")
        await asyncio.wait_for(fut, 5)
        gate.finish.set()
        await asyncio.wait_for(gate_fut, 5)
    assert kept == [True]


async def test_a_part_that_fails_fails_its_item(two_workers: Scheduler) -> None:
    s = two_workers

    def fail() -> None:
        raise ValueError("part")

    def item() -> None:
        s.beside(fail)()

    fut = s.submit(item, deadline=time.monotonic() + 60, realtime=True, owner="lone", kind="t")
    with pytest.raises(ValueError, match="part"):
        await asyncio.wait_for(fut, 5)


@pytest.mark.parametrize(("owner", "takes_the_last_worker"), [("me", True), ("other", False)])
async def test_work_ahead_takes_the_last_worker_only_when_all_work_is_one_requests(
    two_workers: Scheduler, owner: str, takes_the_last_worker: bool
) -> None:
    """One worker runs a request's work ahead of time; more of that request's may take
    the other (a reader far ahead: every core is its), another request's may not (a
    newcomer or due work would find no worker free)."""
    s = two_workers
    gate, gate_fut = await run_blocking(s, time.monotonic() + 60, owner="me")
    ahead = Blocking()
    fut = s.submit(ahead, deadline=time.monotonic() + 60, realtime=True, owner=owner, kind="t")
    ran = await asyncio.to_thread(ahead.started.wait, 0.5)
    assert ran == takes_the_last_worker
    gate.finish.set()
    ahead.finish.set()
    await asyncio.wait_for(asyncio.gather(gate_fut, fut), 5)


async def test_an_idle_worker_reads_the_cpu_wait_off_the_lock() -> None:
    """With nothing to run, a worker still reads the wait each time its wait runs out (so it
    follows other processes while the daemon idles), on its own thread, the queue's lock
    let go (procfs reads are file I/O)."""
    s = Scheduler(1, name="idle")
    s.idle_s = 0.02
    seen: list[tuple[str, bool]] = []

    class Probe(RunQueueWait):
        def sample(self) -> None:
            seen.append((threading.current_thread().name, s._lock.locked()))

    s.cpu_wait = Probe()
    s.start()
    try:
        await until(lambda: len(seen) >= 3)
    finally:
        s.stop()
    assert len(seen) >= 3 and set(seen[:3]) == {("idle-0", False)}


def test_a_request_is_lone_while_its_items_are_all_the_work() -> None:
    """``lone``: nothing queued or running, or only ``owner``'s (a stream then encodes two
    clauses ahead); another owner's item queued, not."""
    s = Scheduler(1, name="lone")  # never started: what is submitted stays queued
    mine, other = object(), object()

    async def scenario() -> list[bool]:
        seen = [s.lone(mine)]
        s.submit(lambda: None, deadline=0.0, realtime=False, owner=mine, kind="t")
        seen.append(s.lone(mine))
        s.submit(lambda: None, deadline=0.0, realtime=False, owner=other, kind="t")
        seen.append(s.lone(mine))
        s.cancel_owner(other)
        seen.append(s.lone(mine))
        s.cancel_owner(mine)
        return seen

    assert asyncio.run(scenario()) == [True, True, False, True]


@pytest.mark.parametrize(
    ("own_cores", "owner", "runs_beside"),
    [(True, "me", True), (False, "me", False), (True, "other", False)],
)
async def test_a_lone_newcomer_s_work_ahead_runs_beside_it_only_on_cores_of_its_own(
    own_cores: bool, owner: str, runs_beside: bool
) -> None:
    """While a first item runs, work ahead waits (it would share the newcomer's cores),
    but the newcomer's own next encode where each worker has a core to itself; another
    request's work ahead still waits."""
    with running_scheduler(2, own_cores=own_cores) as s:
        first, first_fut = await run_blocking(s, time.monotonic(), owner="me", urgent=True)
        ahead = Blocking()
        fut = s.submit(ahead, deadline=time.monotonic() + 60, realtime=True, owner=owner, kind="t")
        ran = await asyncio.to_thread(ahead.started.wait, 0.5)
        assert ran == runs_beside
        assert first.runs == 1 and s.snapshot()["stopped_ahead"] == 0
        first.finish.set()
        ahead.finish.set()
        await asyncio.wait_for(asyncio.gather(first_fut, fut), 5)
