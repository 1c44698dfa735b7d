"""Bring-your-own voices on the daemon as it is built: a voices directory with the
generated test voices (tests/fixtures/voices), a truncated file beside them, speakers by
name through every door (protocol v1, HTTP, Wyoming, sd_ttsd), and ``ttsctl voices``.

The test voices' configs are copied with their noise set to 0, so every door's default
rendering is deterministic: the same speaker gives the same samples, another speaker other
samples."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize, SynthesizeVoice

from appliance.client import Client
from tests.clients.speechd.modpipe import ModulePipe
from tests.conftest import Daemon, DaemonFactory
from tests.doors.http.conftest import free_port, wait_http
from tests.doors.wyoming.wyoming_helpers import client_for, request, wyoming_uri
from tests.fixtures import GERMAN, MULTI, voice_path

TEXT = "Good morning, the kettle is on."
BROKEN = "en_US-broken-x_low"


SPANISH = "es_ES-testvoice-x_low"
"""The German test voice's graph with a Spanish config: espeak-ng's es, language es_ES."""


def install_quiet(name: str, into: Path, as_name: str | None = None, **config: Any) -> Path:
    """A fixture voice copied into ``into`` with its config's noise at 0 (and ``config``)."""
    dest = into / f"{as_name or name}.onnx"
    shutil.copyfile(voice_path(name), dest)
    cfg = json.loads(Path(f"{voice_path(name)}.json").read_text())
    cfg["inference"].update(noise_scale=0.0, noise_w=0.0)
    cfg.update(config)
    Path(f"{dest}.json").write_text(json.dumps(cfg))
    return dest


@pytest.fixture(scope="module")
def box(
    daemon_factory: DaemonFactory, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Daemon, str]:
    voices = tmp_path_factory.mktemp("voices")
    install_quiet(MULTI, voices)
    install_quiet(GERMAN, voices)
    install_quiet(GERMAN, voices, SPANISH, espeak={"voice": "es"}, language={"code": "es_ES"})
    data = voice_path(GERMAN).read_bytes()
    (voices / f"{BROKEN}.onnx").write_bytes(data[: len(data) // 3])  # cut off mid-copy
    shutil.copyfile(f"{voice_path(GERMAN)}.json", voices / f"{BROKEN}.onnx.json")
    port = free_port()
    d = daemon_factory(
        {
            "voices": {"voices_dir": str(voices)},
            "wyoming": {"uri": "tcp://127.0.0.1:0", "allowed_networks": ["127.0.0.1/32"]},
            "http": {
                "listen": f"127.0.0.1:{port}",
                "voice_map": {"nova": f"{MULTI}:carol", "echo": f"{MULTI}:1"},
            },
        },
        timeout=900,  # a first cut of every voice, on a busy box
    )
    base = f"http://127.0.0.1:{port}"
    wait_http(base, d)
    return d, base


def _info(d: Daemon) -> dict[str, Any]:
    with Client(d.socket) as c:
        return c.request("info")


def _v1(d: Daemon, **opts: Any) -> bytes:
    with Client(d.socket) as c:
        return c.synthesize_all(TEXT, voice=MULTI, format="s16le", **opts).audio


def _http(base: str, voice: str) -> tuple[int, bytes]:
    body = json.dumps({"input": TEXT, "voice": voice, "response_format": "pcm"}).encode()
    req = urllib.request.Request(
        f"{base}/v1/audio/speech", body, {"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _wyoming(d: Daemon, speaker: str | None) -> bytes:
    ev = Synthesize(text=TEXT, voice=SynthesizeVoice(name=MULTI, speaker=speaker)).event()
    r = asyncio.run(request(wyoming_uri(d), ev))
    assert r.error is None, r.error
    return r.audio().tobytes()


def test_a_truncated_voice_is_skipped_in_one_line_naming_it(box: tuple[Daemon, str]) -> None:
    d, _ = box
    lines = [ln for ln in d.log().splitlines() if f"{BROKEN}.onnx" in ln]
    assert len(lines) == 1 and "skipped" in lines[0], lines
    assert "Traceback" not in d.log()
    info = _info(d)
    assert {v["name"] for v in info["voices"]} == {"en_US-joe-medium", MULTI, GERMAN, SPANISH}
    (skipped,) = info["voices_skipped"]
    assert skipped["file"].endswith(f"{BROKEN}.onnx") and skipped["reason"]


def test_info_lists_speakers_quality_and_the_languages_with_rules(
    box: tuple[Daemon, str],
) -> None:
    voices = {v["name"]: v for v in _info(box[0])["voices"]}
    multi, german = voices[MULTI], voices[GERMAN]
    assert multi["speakers"] == ["alice", "bob", "carol", "dave"]
    assert multi["default_speaker"] == "alice" and multi["num_speakers"] == 4
    assert multi["quality"] == "x_low" and multi["streaming"] and multi["flow"] == "windowed"
    assert german["speakers"] == [] and german["streaming"] and german["language"] == "de_DE"
    assert voices["en_US-joe-medium"]["normalized"] and german["normalized"]
    assert _info(box[0])["normalizer_languages"] == ["de", "en", "es"]


def _said(d: Daemon, voice: str, text: str) -> tuple[str, list[str]]:
    """The phonemes the voice says for ``text`` (each clause in context) and its words."""
    with Client(d.socket) as c:
        reply = c.request("phonemes", text=text, voice=voice)
    clauses = reply["clauses"]
    return " ".join(cl["phonemes"] for cl in clauses), [
        w["text"] for cl in clauses for w in cl["words"]
    ]


# Held out: written after the rules, never used to shape them.  Each written form must
# give the phonemes espeak-ng gives for the words spelled out.
HELD_OUT = [
    (
        GERMAN,
        "Der Zug fährt am 04.11.2027 um 7:45 Uhr ab und kostet 12,90 €.",
        "Der Zug fährt am vierten November zweitausendsiebenundzwanzig um sieben Uhr"
        " fünfundvierzig ab und kostet zwölf Euro neunzig Cent.",
    ),
    (
        GERMAN,
        "Es sind 25 °C, bis zum See sind es 3 km und 80 % der Plätze sind frei.",
        "Es sind fünfundzwanzig Grad Celsius, bis zum See sind es drei Kilometer und achtzig"
        " Prozent der Plätze sind frei.",
    ),
    (
        SPANISH,
        "La reunión es el 15/06/2026 a las 9:30 y cuesta 45,75 €.",
        "La reunión es el quince de junio de dos mil veintiséis a las nueve y treinta y cuesta"
        " cuarenta y cinco euros con setenta y cinco céntimos.",
    ),
    (
        SPANISH,
        "Hay 2 km hasta la playa, la 3ª planta tiene 1.250 libros y hace -3 °C.",
        "Hay dos kilómetros hasta la playa, la tercera planta tiene mil doscientos cincuenta"
        " libros y hace menos tres grados centígrados.",
    ),
]


@pytest.mark.parametrize(("voice", "written", "spoken"), HELD_OUT)
def test_german_and_spanish_are_read_as_spelled_out_at_the_phoneme_level(
    box: tuple[Daemon, str], voice: str, written: str, spoken: str
) -> None:
    d, _ = box
    phonemes, words = _said(d, voice, written)
    assert phonemes == _said(d, voice, spoken)[0]
    assert not any(ch.isdigit() for w in words for ch in w), words


def test_v1_speaker_by_name_or_number(box: tuple[Daemon, str]) -> None:
    d, _ = box
    alice, bob = _v1(d, speaker="alice"), _v1(d, speaker="bob")
    assert alice and bob and alice != bob
    assert _v1(d, speaker="bob") == bob
    assert _v1(d, speaker=1) == bob
    assert _v1(d) == alice  # the config's default_speaker_id
    with Client(d.socket) as c, pytest.raises(Exception, match="no speaker"):
        c.synthesize_all(TEXT, voice=MULTI, speaker="zed")


def test_http_voice_names_a_speaker_directly_or_through_voice_map(
    box: tuple[Daemon, str],
) -> None:
    d, base = box
    bob, carol = _v1(d, speaker="bob"), _v1(d, speaker="carol")
    assert _http(base, f"{MULTI}:bob") == (200, bob)
    assert _http(base, f"{MULTI}:2") == (200, carol)
    assert _http(base, "nova") == (200, carol)  # voice_map: NAME:SPEAKER
    assert _http(base, "echo") == (200, bob)
    status, body = _http(base, f"{MULTI}:zed")
    assert status == 400 and b"no speaker" in body
    listed = json.loads(urllib.request.urlopen(f"{base}/v1/audio/voices", timeout=30).read())
    multi = next(v for v in listed["voices"] if v["name"] == MULTI)
    assert multi["speakers"] == ["alice", "bob", "carol", "dave"]
    assert listed["openai_aliases"]["nova"] == f"{MULTI}:carol"


def test_wyoming_describe_lists_speakers_and_synthesize_honours_one(
    box: tuple[Daemon, str],
) -> None:
    d, _ = box

    async def describe() -> Info:
        async with client_for(wyoming_uri(d)) as c:
            await c.write_event(Describe().event())
            while True:
                ev = await c.read_event()
                assert ev is not None
                if Info.is_type(ev.type):
                    return Info.from_event(ev)

    voices = {v.name: v for v in asyncio.run(describe()).tts[0].voices}
    assert [s.name for s in voices[MULTI].speakers or ()] == ["alice", "bob", "carol", "dave"]
    assert voices[GERMAN].languages == ["de_DE"]
    v1_bob = np.frombuffer(_v1(d, speaker="bob"), "<i2")
    bob = np.frombuffer(_wyoming(d, "bob"), "<i2")
    assert np.array_equal(bob, v1_bob)
    assert np.array_equal(np.frombuffer(_wyoming(d, "bob"), "<i2"), bob)
    assert not np.array_equal(np.frombuffer(_wyoming(d, "dave"), "<i2"), bob)


def test_sd_ttsd_lists_one_voice_per_speaker_and_speaks_the_one_chosen(
    box: tuple[Daemon, str], tmp_path: Path
) -> None:
    d, _ = box
    pipe = ModulePipe(d.socket, tmp_path)
    try:
        pipe.init()
        pipe.send("LIST VOICES\n")
        names = [row.split("\t")[0] for row in pipe.expect(200).data]
        assert [n for n in names if n.startswith(MULTI)] == [
            f"{MULTI}:{s}" for s in ("alice", "bob", "carol", "dave")
        ]
        assert GERMAN in names and "en_US-joe-medium" in names
        audio = {}
        for speaker in ("bob", "carol", "bob"):
            pipe.set(synthesis_voice=f"{MULTI}:{speaker}")
            pipe.speak(TEXT)
            got = b"".join(r.pcm for r in pipe.events_until_end() if r.code == 705)
            assert got, speaker
            assert audio.setdefault(speaker, got) == got
        assert audio["bob"] != audio["carol"]
    finally:
        pipe.quit()


def test_ttsctl_voices_shows_a_table_and_json(box: tuple[Daemon, str]) -> None:
    d, _ = box
    cmd = [sys.executable, "-m", "appliance.clients.ctl", "--socket", d.socket, "voices"]
    table = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True).stdout
    lines = table.splitlines()
    assert lines[0].split() == ["name", "language", "rate", "speakers", "quality", "status"]
    multi = next(ln for ln in lines if ln.startswith(MULTI))
    assert "4 (alice, bob, carol, …)" in multi and "loaded, streaming" in multi
    assert any(ln.startswith(BROKEN) and "skipped:" in ln for ln in lines)
    out = subprocess.run([*cmd, "--json"], capture_output=True, text=True, timeout=60, check=True)
    rows = {r["name"]: r for r in json.loads(out.stdout)["voices"]}
    assert rows[GERMAN]["language"] == "de_DE" and rows[GERMAN]["status"] == "loaded, streaming"
    assert rows["en_US-joe-medium"]["default"] and rows[MULTI]["rate"] == 22050
