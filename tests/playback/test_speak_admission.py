"""Admission for ``speak``: a request that cuts what is speaking takes its place, so a busy
daemon (the speech it cuts running late) does not refuse it — on a real player and the
service that ``Runtime.load`` builds."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.core.runtime import Runtime
from appliance.core.service import Service, Stream, StreamResult
from appliance.errors import ErrorCode, ServiceError
from appliance.ops.config import Config, VoicesConfig
from appliance.playback import Player
from appliance.speech import SpeechRequest

SENTENCE = "This announcement keeps going for quite a while so that it can be interrupted. "
LONG = SENTENCE * 10
"""~38 s of audio, to be still in synthesis when the next request asks: 3 sentences' 11 s
were once all made by the time the device played the first sample (beside the parallel
suite and a hog), so the text was no load and a request that cuts nothing was admitted."""


@pytest.fixture(scope="module")
def runtime(voice_cache: Path, player: Player) -> Iterator[Runtime]:
    rt = Runtime.load(Config(voices=VoicesConfig(cache_dir=str(voice_cache))))
    try:
        yield dataclasses.replace(rt, player=player)
    finally:
        rt.close()  # without the player: the player fixture closes it


def refuse_all(service: Service) -> None:
    """From here every admission check says busy (as on a box whose work runs late)."""
    rt = service.runtime
    sched = dataclasses.replace(rt.config.scheduler, admission_max_load=0.0)
    service.swap_runtime(
        dataclasses.replace(rt, config=dataclasses.replace(rt.config, scheduler=sched))
    )


async def open_speak(service: Service, text: str, priority: str) -> Stream:
    return await service.open_stream(
        SpeechRequest(text=text, priority=priority), door="test", speak_key="tester"
    )


async def speaking(service: Service, text: str, priority: str) -> asyncio.Task[StreamResult]:
    """A ``speak`` whose first sample the device has; the task ends with its result."""
    stream = await open_speak(service, text, priority)
    started = asyncio.Event()

    async def queued(position: int) -> None:
        pass

    task = asyncio.create_task(stream.run_speech(queued, lambda _ms: started.set()))
    await asyncio.wait_for(started.wait(), timeout=30)
    return task


async def admitted(service: Service, text: str, priority: str) -> bool:
    try:
        stream = await open_speak(service, text, priority)
    except ServiceError as exc:
        assert exc.code == ErrorCode.BUSY
        return False
    stream.close()
    return True


def test_a_speak_that_cuts_the_speaking_text_is_admitted_when_busy(runtime: Runtime) -> None:
    async def scenario() -> None:
        service = Service(runtime)
        text = await speaking(service, LONG, "text")
        refuse_all(service)
        # A request that cuts nothing is refused; one that cuts the text is not.
        with pytest.raises(ServiceError) as refused:
            await service.open_stream(SpeechRequest(text="Hello."), door="test")
        assert refused.value.code == ErrorCode.BUSY
        assert not await admitted(service, "A notification.", "notification")
        # Long enough to be still in synthesis at the next check: a message whose audio
        # is all made is no load, and a request behind it is rightly admitted (one of
        # ~5 s was all made by then, once, in a fresh clone's suite beside a hog).
        message = await speaking(service, "Important news. " + SENTENCE * 3, "message")
        cut = await asyncio.wait_for(text, timeout=30)
        assert cut.interrupted is True
        # A message does not cut a message (it would wait): refused while busy.
        assert not await admitted(service, "More news.", "message")
        done = await asyncio.wait_for(message, timeout=60)
        assert done.interrupted is False and not done.cancelled

    asyncio.run(scenario())
