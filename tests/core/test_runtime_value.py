"""A runtime is a value: frozen once ``Runtime.load`` returns, one object per voice, and a
reload makes a new one that the service swaps in whole (appliance.reload's Reloader) while
the one a caller holds stays as it was.  On the object ``Runtime.load`` builds, no daemon."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from appliance.core import voiceset
from appliance.core.runtime import Runtime
from appliance.core.service import Service
from appliance.ops.config import parse_config
from appliance.ops.offloop import FileReads
from appliance.reload import Reloader


def _config(voice_cache: Path) -> dict[str, object]:
    return {"voices": {"cache_dir": str(voice_cache)}, "engine": {"workers": 1}}


@pytest.fixture(scope="module")
def runtime(voice_cache: Path) -> Iterator[Runtime]:
    rt = Runtime.load(parse_config(_config(voice_cache)), warm=False)
    rt.scheduler.start()
    yield rt
    rt.close()


def test_a_loaded_runtime_cannot_be_changed(runtime: Runtime) -> None:
    name = runtime.default_voice
    with pytest.raises(dataclasses.FrozenInstanceError):
        runtime.config = runtime.config  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        runtime.lexicon = None  # type: ignore[misc]
    with pytest.raises(TypeError):
        runtime.voices[name] = runtime.voices[name]  # type: ignore[index]
    with pytest.raises(TypeError):
        runtime.skipped["x.onnx"] = "no"  # type: ignore[index]


def test_a_voice_is_one_object_with_what_it_was_loaded_from(runtime: Runtime) -> None:
    name = runtime.default_voice
    voice = runtime.voices[name]
    assert not hasattr(runtime, "voice_meta")
    assert voice.source.name == name and voice.source.info.language == voice.language
    assert voice.source.model_path.is_file()
    described = runtime.info()["voices"][0]
    assert described["name"] == name and described["streaming"] == voice.source.split_ok
    # Speakers resolve from the same object: a one-speaker voice has no speaker "7".
    assert runtime.resolve_voice(name, None) == (voice, voice.source.info.speaker_id(None))


def test_a_new_voice_set_is_a_new_runtime_and_the_old_one_is_untouched(
    runtime: Runtime,
) -> None:
    name = runtime.default_voice
    copy = dataclasses.replace(runtime.voices[name], name="copy")
    new = voiceset.apply(runtime, voiceset.VoiceChanges(added={"copy": copy}))
    assert set(new.voices) == {name, "copy"} and set(runtime.voices) == {name}
    # The warm-up's progress, the scheduler and the metrics are shared, not copied.
    assert new.warm is runtime.warm and new.scheduler is runtime.scheduler
    assert new.metrics is runtime.metrics


def test_a_reload_swaps_a_new_runtime_into_the_service(
    runtime: Runtime, voice_cache: Path, tmp_path: Path
) -> None:
    """A live key changed in the file: the service serves from a new runtime with it; the
    runtime held before the reload still has the old value."""
    path = tmp_path / "ttsd.yaml"
    path.write_text(yaml.safe_dump({**_config(voice_cache), "limits": {"drain_notice_s": 7.5}}))

    async def scenario() -> Runtime:
        service = Service(runtime)
        await Reloader(service, str(path), {}, FileReads()).reload()
        service.close()
        return service.runtime

    after = asyncio.run(scenario())
    assert after is not runtime
    assert after.config.limits.drain_notice_s == 7.5
    assert runtime.config.limits.drain_notice_s != 7.5
    assert set(after.voices) == set(runtime.voices)
