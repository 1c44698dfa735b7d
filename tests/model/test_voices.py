"""Voices: discovery, the verified cut and its cache, whole-sentence fallback, speakers.

The bundled voice is cut afresh once for this module (``joe``, 15-40 s); the checks of
what that cut found and cached each load it again from the same cache.  The checks of a
stage that fails (a stage patched to fail, so the voice must be cut again with it) cut the
generated German test voice instead (tests/fixtures/voices, a few seconds): what they test
is the cutting machinery, which is the same for it (the same architecture, so the same
stages and checks), and ``german`` is its cut without the patch to compare with."""

from __future__ import annotations

import collections
import json
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import onnx
import pytest

from appliance.model.conv2d import lift_to_2d as real_lift_to_2d
from appliance.model.voices import (
    Voice,
    VoiceError,
    VoiceInfo,
    bundled_voice_path,
    discover,
    find_cut,
    find_flow,
    load_voice,
)
from appliance.model.voices.verify import MARGIN_CANDIDATES
from tests.conftest import Daemon, DaemonFactory
from tests.fixtures import GERMAN, MULTI, voice_copy, voice_path
from tests.wire import Wire


@pytest.fixture(scope="module")
def joe(tmp_path_factory: pytest.TempPathFactory) -> tuple[Voice, Path]:
    """The bundled voice cut afresh (the voice ``load_voice`` returned from the cut itself),
    and the cache it went to.  No test changes that cache."""
    cache = tmp_path_factory.mktemp("joe-cut")
    return load_voice("joe", bundled_voice_path(), cache), cache


@pytest.fixture(scope="module")
def german_cut(tmp_path_factory: pytest.TempPathFactory) -> tuple[Voice, collections.Counter[str]]:
    """The German test voice cut afresh, as it is, and the sessions the cut loaded (by file
    name).  (Not from the session's cache: a daemon may have cut it there under another
    config.)"""
    import appliance.model.engine.sessions as engine

    loaded: collections.Counter[str] = collections.Counter()
    real = engine.open_session

    def counted(path: Path, *args: Any, **kwargs: Any) -> Any:
        loaded[Path(path).name] += 1
        return real(path, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(engine, "open_session", counted)
        voice = _cut_german(tmp_path_factory.mktemp("german-cut"))
    return voice, loaded


@pytest.fixture(scope="module")
def german(german_cut: tuple[Voice, collections.Counter[str]]) -> Voice:
    """The German cut: what the patched cuts compare with."""
    voice = german_cut[0]
    # Every stage passes as it is: the patched cuts below each take one of them away.
    assert voice.split_ok and voice.flow_split is not None, voice.split_note
    assert voice.margin_decoder_path is not None and voice.lean_decoder_path is not None
    return voice


def _cut_german(cache: Path) -> Voice:
    return load_voice(GERMAN, voice_path(GERMAN), cache)


def test_a_cut_loads_the_whole_model_once(
    german_cut: tuple[Voice, collections.Counter[str]],
) -> None:
    """Every check of a cut compares with the same fused audio (verify.Reference): the whole
    model, the largest session a cut loads, is loaded for the first check only."""
    voice, loaded = german_cut
    assert loaded[voice.model_path.name] == 1, loaded
    assert loaded["decoder.onnx"] >= 2  # and more than one check ran


def test_cut_is_cached_by_sha256(joe: tuple[Voice, Path]) -> None:
    v1, cache = joe
    assert v1.split_ok and v1.encoder_path and v1.decoder_path
    stamp = v1.encoder_path.stat().st_mtime_ns
    v2 = load_voice("joe", bundled_voice_path(), cache)
    assert v2.encoder_path == v1.encoder_path
    assert v2.encoder_path.stat().st_mtime_ns == stamp  # reused, not cut again
    assert v1.sha256[:32] in str(v1.encoder_path)


def test_discovery_skips_odd_files(tmp_path: Path) -> None:
    (tmp_path / "no-config.onnx").write_bytes(b"x")
    (tmp_path / "-bad name.onnx").write_bytes(b"x")
    (tmp_path / "-bad name.onnx.json").write_text("{}")
    found = discover(str(tmp_path))
    assert set(found) == {"en_US-joe-medium"}


def _info(**over: object) -> VoiceInfo:
    cfg = json.loads(Path(f"{bundled_voice_path()}.json").read_text())
    cfg.update(over)
    return VoiceInfo.from_config("v", cfg)


def test_speaker_mapping() -> None:
    single = _info()
    assert single.speaker_id(None) is None
    with pytest.raises(KeyError):
        single.speaker_id("alice")
    multi = _info(num_speakers=3, speaker_id_map={"alice": 0, "bob": 2, "carol": 1})
    assert multi.speaker_id(None) == 0
    assert multi.speaker_id("bob") == 2
    assert multi.speaker_id(1) == 1
    with pytest.raises(KeyError):
        multi.speaker_id(3)
    with pytest.raises(KeyError):
        multi.speaker_id("../../x")
    assert multi.describe()["speakers"] == ["alice", "carol", "bob"]


@pytest.fixture(scope="module")
def voices_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("voices")
    src = bundled_voice_path()
    # A second voice: the same model under another name.
    shutil.copy(src, d / "en_GB-copy-medium.onnx")
    shutil.copy(f"{src}.json", d / "en_GB-copy-medium.onnx.json")
    # A voice whose graph cannot be cut by pattern: it must run whole-sentence.
    model = onnx.load(str(src))
    for init in model.graph.initializer:
        if init.name == "dec.conv_pre.weight":
            init.name = "renamed.weight"
    for node in model.graph.node:
        node.input[:] = ["renamed.weight" if i == "dec.conv_pre.weight" else i for i in node.input]
    onnx.save(model, str(d / "en_US-odd-medium.onnx"))
    shutil.copy(f"{src}.json", d / "en_US-odd-medium.onnx.json")
    return d


def test_voices_dir_and_whole_sentence_fallback(
    daemon_factory: DaemonFactory, voices_dir: Path
) -> None:
    d = daemon_factory({"voices": {"voices_dir": str(voices_dir)}})
    with Wire(d.socket) as w:
        info = w.call({"op": "info", "id": 1})
        by_name = {v["name"]: v for v in info["voices"]}
        assert set(by_name) == {"en_US-joe-medium", "en_GB-copy-medium", "en_US-odd-medium"}
        assert by_name["en_GB-copy-medium"]["streaming"] is True
        assert by_name["en_US-odd-medium"]["streaming"] is False
        assert "cannot split" in by_name["en_US-odd-medium"]["note"]
        for rid, voice in ((2, "en_GB-copy-medium"), (3, "en_US-odd-medium")):
            w.send({"op": "synthesize", "id": rid, "text": "One. Two three.", "voice": voice})
            evs = w.until(rid)
            assert evs[0]["voice"] == voice and evs[-1]["event"] == "end"
        # Whole-sentence: one chunk per clause.
        w.send(
            {"op": "synthesize", "id": 4, "text": "One. Two three.", "voice": "en_US-odd-medium"}
        )
        assert sum(e["event"] == "chunk" for e in w.until(4)) == 2
    assert "running whole-sentence" in d.log()


def test_flow_split_is_found_verified_and_cached(joe: tuple[Voice, Path]) -> None:
    v1, cache = joe
    assert v1.flow_split is not None and v1.cut is not None
    assert v1.cut.z_p and v1.cut.mask and v1.cut.flow_context == 32
    assert v1.flow_split.prior_path.is_file() and v1.flow_split.flow_path.is_file()
    meta = json.loads((v1.flow_split.prior_path.parent / "meta.json").read_text())
    assert meta["flow_ok"] is True
    v2 = load_voice("joe", bundled_voice_path(), cache)
    assert v2.flow_split == v1.flow_split and v2.cut == v1.cut


def test_smallest_passing_context_is_found_and_cached(joe: tuple[Voice, Path]) -> None:
    v1, cache = joe
    assert v1.context_frames == 10  # 8 is off by ~1.5e-3, over the 1e-4 gate
    assert v1.flow_split is not None
    meta_path = v1.flow_split.prior_path.parent / "meta.json"
    meta = json.loads(meta_path.read_text())
    assert meta["context_frames"] == 10
    assert load_voice("joe", bundled_voice_path(), cache).context_frames == 10


def test_a_cached_context_the_check_never_tried_is_cut_again(german: Voice, tmp_path: Path) -> None:
    """A cache entry with a context the check never tried is cut again, not trusted (on a
    copy of the German voice's cache entry)."""
    assert german.flow_split is not None
    slot = german.flow_split.prior_path.parent
    shutil.copytree(slot, tmp_path / slot.name)
    meta_path = tmp_path / slot.name / "meta.json"
    meta = json.loads(meta_path.read_text())
    assert meta["context_frames"] == german.context_frames
    meta["context_frames"] = 1
    meta_path.write_text(json.dumps(meta))
    assert _cut_german(tmp_path).context_frames == german.context_frames
    assert json.loads(meta_path.read_text())["context_frames"] == german.context_frames


def test_no_smaller_context_passing_keeps_the_exact_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import appliance.model.voices.verify as verify

    monkeypatch.setattr(verify, "CONTEXT_CANDIDATES", (4, 6))  # both fail the gate
    v = _cut_german(tmp_path)
    assert v.split_ok and v.flow_split is not None
    assert v.context_frames == verify.DEFAULT_CONTEXT == 16


def test_graph_without_flow_noise_has_no_flow_split() -> None:
    model = onnx.load(str(bundled_voice_path()), load_external_data=False)
    names = find_cut(model)
    assert find_flow(model, names).z_p is not None
    for node in model.graph.node:
        if node.op_type == "RandomNormalLike":
            node.op_type = "Identity"
    with pytest.raises(VoiceError, match="flow input"):
        find_flow(model, names)


def test_failed_flow_check_keeps_streaming_with_the_whole_encoder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import appliance.model.voices.load as stages

    monkeypatch.setattr(stages, "verify_flow", lambda *a: (False, "max abs difference 1"))
    v = _cut_german(tmp_path)
    assert v.split_ok and v.flow_split is None
    monkeypatch.undo()
    again = _cut_german(tmp_path)
    assert again.split_ok and again.flow_split is None  # the verdict is cached


def test_the_2d_decoder_is_written_verified_and_cached(joe: tuple[Voice, Path]) -> None:
    v1, cache = joe
    assert v1.lean_decoder_path is not None and v1.lean_decoder_path.is_file()
    meta = json.loads((v1.lean_decoder_path.parent / "meta.json").read_text())
    assert meta["lean_ok"] is True and "max abs difference" in meta["lean_note"]
    stamp = v1.lean_decoder_path.stat().st_mtime_ns
    v2 = load_voice("joe", bundled_voice_path(), cache)
    assert v2.lean_decoder_path == v1.lean_decoder_path
    assert v2.lean_decoder_path.stat().st_mtime_ns == stamp


def test_the_decoder_cropping_its_margins_is_written_verified_and_cached(
    joe: tuple[Voice, Path],
) -> None:
    v1, cache = joe
    assert v1.margin_decoder_path is not None and v1.margin_decoder_path.is_file()
    meta = json.loads((v1.margin_decoder_path.parent / "meta.json").read_text())
    assert meta["margins_ok"] is True and meta["margins_keep"] == 1
    assert "keep 1: max abs difference" in meta["margins_note"]
    assert "margins kept 1" in meta["lean_note"]  # the 2-D decoder crops them too
    stamp = v1.margin_decoder_path.stat().st_mtime_ns
    v2 = load_voice("joe", bundled_voice_path(), cache)
    assert v2.margin_decoder_path == v1.margin_decoder_path
    assert v2.margin_decoder_path.stat().st_mtime_ns == stamp


def test_crops_that_fail_the_check_leave_the_decoders_whole(
    german: Voice, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keeping no context at all (a crop the check must catch): no cropping decoder, and
    the 2-D decoder is written without crops."""
    import appliance.model.margins

    real = appliance.model.margins.add_margin_crops
    monkeypatch.setattr(appliance.model.margins, "add_margin_crops", lambda m, keep: real(m, 0))
    v = _cut_german(tmp_path)
    assert v.split_ok and v.context_frames == german.context_frames
    assert v.margin_decoder_path is None and v.lean_decoder_path is not None
    assert not (v.lean_decoder_path.parent / "decoder_margins.onnx").exists()
    lean = onnx.load(str(v.lean_decoder_path))
    assert not any(n.op_type == "Slice" for n in lean.graph.node)
    meta = json.loads((v.lean_decoder_path.parent / "meta.json").read_text())
    assert meta["margins_ok"] is False and meta["margins_keep"] is None
    tried = [k for k in MARGIN_CANDIDATES if k < v.context_frames]
    assert len(tried) > 1
    for keep in tried:  # every candidate tried
        assert f"keep {keep}: max abs difference" in meta["margins_note"]
    monkeypatch.undo()
    again = _cut_german(tmp_path)
    assert again.margin_decoder_path is None  # the verdict is cached


def test_flow_crops_that_fail_the_check_leave_the_flow_whole(
    german: Voice, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Crops told to keep nothing after each coupling layer fail the check: the flow is
    written again whole and the voice keeps its windowed flow."""
    import appliance.model.margins

    assert german.flow_split is not None  # unpatched, its flow crops its margins
    cropping = onnx.load(str(german.flow_split.flow_path), load_external_data=False)
    assert any(p.key == appliance.model.margins.METADATA_KEY for p in cropping.metadata_props)

    real = appliance.model.margins.add_flow_margin_crops

    def keep_nothing(model: onnx.ModelProto, mask: str) -> onnx.ModelProto:
        cropped = real(model, mask)
        for p in cropped.metadata_props:
            if p.key == appliance.model.margins.METADATA_KEY:
                p.value = ",".join("1:0" for _ in p.value.split(","))
        return cropped

    monkeypatch.setattr(appliance.model.margins, "add_flow_margin_crops", keep_nothing)
    v = _cut_german(tmp_path)
    assert v.flow_split is not None
    flow = onnx.load(str(v.flow_split.flow_path))
    assert not any(p.key == appliance.model.margins.METADATA_KEY for p in flow.metadata_props)
    meta = json.loads((v.flow_split.flow_path.parent / "meta.json").read_text())
    assert meta["flow_ok"] is True
    assert "margins cropped: " in meta["flow_note"] and "; whole: " in meta["flow_note"]


def _off_the_gate(model: onnx.ModelProto) -> onnx.ModelProto:
    """The real rewrite, then the last convolution's weights nudged by 1 %."""
    from onnx import numpy_helper

    lifted = real_lift_to_2d(model)
    last = [n for n in lifted.graph.node if n.op_type == "Conv"][-1]
    for t in lifted.graph.initializer:
        if t.name == last.input[1]:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t) * 1.01, t.name))
    return lifted


def _unknown(model: onnx.ModelProto) -> onnx.ModelProto:
    raise ValueError("Transpose is not known to the 2-D rewrite")


@pytest.mark.parametrize("rewrite", [_off_the_gate, _unknown], ids=["off-gate", "unknown-op"])
def test_a_2d_decoder_that_fails_keeps_the_voice_on_the_1d_one(
    german: Voice, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rewrite: Any
) -> None:
    import appliance.model.conv2d

    monkeypatch.setattr(appliance.model.conv2d, "lift_to_2d", rewrite)
    v = _cut_german(tmp_path)
    assert v.split_ok and v.flow_split is not None
    assert v.context_frames == german.context_frames
    assert v.lean_decoder_path is None
    monkeypatch.undo()
    again = _cut_german(tmp_path)
    assert again.lean_decoder_path is None  # the verdict is cached


def test_daemon_reports_the_windowed_flow(daemon: Daemon) -> None:
    with Wire(daemon.socket) as w:
        info = w.call({"op": "info", "id": 1})
    assert info["voices"][0]["flow"] == "windowed"


@pytest.mark.parametrize(
    "over,why",
    [
        ({"audio.sample_rate": -22050}, "audio.sample_rate -22050 is out of range [8000, 192000]"),
        ({"audio.sample_rate": 10**9}, "audio.sample_rate 1000000000 is out of range"),
        ({"inference.length_scale": 0}, "inference.length_scale 0.0 is out of range (0, 10]"),
        ({"inference.noise_scale": float("inf")}, "inference.noise_scale inf is out of range"),
        (
            {"speaker_id_map": {"alice": 0, "eve": 7}},
            "speaker_id_map 'eve': 7 is not a speaker (num_speakers 4)",
        ),
        ({"num_speakers": 8}, "num_speakers 8: the model has 4"),
        (
            {"phoneme_id_map": {"a": [0], "b": [300]}},
            "phoneme_id_map: id 300 is beyond the model's",
        ),
    ],
)
def test_a_voice_config_out_of_range_is_refused_by_the_one_check(
    tmp_path: Path, over: dict[str, Any], why: str
) -> None:
    """Before: `sample_rate: -22050` made v1's audio_ms negative and HTTP answer 500 with a
    traceback; a speaker beyond the model's, an ONNX Runtime traceback per request."""
    from appliance.model.voices.manage import check_pair

    model = voice_copy(tmp_path, "en_US-bad-x_low", **over)
    with pytest.raises(VoiceError) as info:
        check_pair("en_US-bad-x_low", model)
    assert str(info.value).startswith("voice en_US-bad-x_low: bad config: ")
    assert why in str(info.value)
    with pytest.raises(VoiceError, match="bad config"):  # as start and reload load it
        load_voice("en_US-bad-x_low", model, tmp_path / "cache")
    assert check_pair("en_US-ok-x_low", voice_copy(tmp_path, "en_US-ok-x_low")).num_speakers == 4


def test_discovery_takes_regular_files_only(tmp_path: Path) -> None:
    """A FIFO's open waits for a writer: it wedged the reload (and then SIGTERM)."""
    os.mkfifo(tmp_path / "en_US-fifo-x_low.onnx")
    shutil.copyfile(f"{voice_path(MULTI)}.json", tmp_path / "en_US-fifo-x_low.onnx.json")
    voice_copy(tmp_path, "en_US-cfgfifo-x_low").with_suffix(".onnx.json").unlink()
    os.mkfifo(tmp_path / "en_US-cfgfifo-x_low.onnx.json")
    (tmp_path / "en_US-zero-x_low.onnx").symlink_to("/dev/zero")
    shutil.copyfile(f"{voice_path(MULTI)}.json", tmp_path / "en_US-zero-x_low.onnx.json")
    (tmp_path / "en_US-dir-x_low.onnx").mkdir()
    shutil.copyfile(f"{voice_path(MULTI)}.json", tmp_path / "en_US-dir-x_low.onnx.json")
    voice_copy(tmp_path, "en_US-link-x_low").rename(tmp_path / "real.onnx")
    (tmp_path / "en_US-link-x_low.onnx").symlink_to(tmp_path / "real.onnx")
    skipped: dict[str, str] = {}
    found = discover(str(tmp_path), skipped)
    assert set(found) == {"en_US-joe-medium", "en_US-link-x_low"}  # a link to a file is fine
    assert {Path(p).name: why for p, why in skipped.items()} == {
        "en_US-fifo-x_low.onnx": "not a regular file",
        "en_US-cfgfifo-x_low.onnx": "en_US-cfgfifo-x_low.onnx.json is not a regular file",
        "en_US-zero-x_low.onnx": "not a regular file",
        "en_US-dir-x_low.onnx": "not a regular file",
        "real.onnx": "no real.onnx.json beside it",
    }
    # Replaced by a FIFO after discovery: refused when read, not waited on.
    fifo = tmp_path / "en_US-fifo-x_low.onnx"
    with pytest.raises(VoiceError, match="not a regular file"):
        load_voice("en_US-fifo-x_low", fifo, tmp_path / "cache")


def test_a_read_that_hangs_is_given_up_and_not_started_again_while_stuck() -> None:
    """A hung network file system: the read is left in a daemon thread, the caller goes on."""
    from appliance.model.voices.pair import within

    release = threading.Event()
    t0 = time.monotonic()
    with pytest.raises(VoiceError, match=r"hung: not read within 0\.2 s"):
        within(0.2, lambda: release.wait(30), "hung")
    assert time.monotonic() - t0 < 5
    with pytest.raises(VoiceError, match="an earlier read has not returned"):
        within(0.2, lambda: True, "hung")
    release.set()
    deadline = time.monotonic() + 10
    while True:  # once the stuck read returns, the file may be read again
        try:
            assert within(5, lambda: 7, "hung") == 7
            break
        except VoiceError:
            assert time.monotonic() < deadline
            time.sleep(0.05)
