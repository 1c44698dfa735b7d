"""sd_ttsd's LIST VOICES rows for multi-speaker voices, and NAME:SPEAKER picked back apart
(the daemon round trip is in tests/daemon/test_speakers_on_every_door.py)."""

from __future__ import annotations

from appliance.clients.speechd.options import SPEAKERS_LISTED
from appliance.clients.speechd.options import listed_names as _listed_names
from appliance.clients.speechd.options import voice_speaker as _voice_speaker


def test_a_904_speaker_voice_lists_its_first_speakers_only() -> None:
    speakers = [f"p{i}" for i in range(904)]
    rows = _listed_names({"name": "en_US-libritts_r-medium", "speakers": speakers})
    assert len(rows) == SPEAKERS_LISTED == 32
    assert rows[0] == "en_US-libritts_r-medium:p0" and rows[-1] == "en_US-libritts_r-medium:p31"


def test_a_single_speaker_voice_is_one_row_by_its_name() -> None:
    assert _listed_names({"name": "en_US-joe-medium", "speakers": []}) == ["en_US-joe-medium"]


def test_name_and_speaker_come_apart_at_the_first_colon() -> None:
    assert _voice_speaker("en_US-libritts_r-medium:p903") == ("en_US-libritts_r-medium", "p903")
    assert _voice_speaker("en_US-joe-medium") == ("en_US-joe-medium", None)
    assert _voice_speaker("v:") == ("v", None)
    assert _voice_speaker(None) == (None, None)
    assert _voice_speaker("v:" + "x" * 1000)[1] == "x" * 256
