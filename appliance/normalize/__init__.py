"""Written forms → spoken forms, per language, keeping the map to the original text."""

from __future__ import annotations

from appliance.textmap import MappedText


def normalize(text: MappedText, language: str) -> MappedText:
    """Expand numbers, dates, units … for ``language`` (a voice language such as ``en_US``).

    Languages without rules pass through unchanged.
    """
    return text
