"""What CHAR and KEY say: a character or a key name as words.

speech-dispatcher sends ``CHAR`` with one character (``space`` for a blank) and ``KEY``
with a key name: a character, an X keysym-like name (``Return``, ``BackSpace``, ``F1``,
``kp-enter``), or modifiers joined by ``_`` (``shift_a``, ``control_alt_delete``).
"""

from __future__ import annotations

import unicodedata

CHARS = {
    " ": "space",
    ".": "dot",
    ",": "comma",
    ";": "semicolon",
    ":": "colon",
    "!": "exclamation mark",
    "?": "question mark",
    "'": "apostrophe",
    '"': "quote",
    "-": "dash",
    "_": "underscore",
    "/": "slash",
    "\\": "backslash",
    "(": "left paren",
    ")": "right paren",
    "[": "left bracket",
    "]": "right bracket",
    "{": "left brace",
    "}": "right brace",
    "<": "less than",
    ">": "greater than",
    "=": "equals",
    "+": "plus",
    "*": "star",
    "&": "and",
    "%": "percent",
    "$": "dollar",
    "#": "hash",
    "@": "at",
    "^": "caret",
    "~": "tilde",
    "`": "grave",
    "|": "bar",
    "\t": "tab",
    "\n": "newline",
}

KEYS = {
    "space": "space",
    "return": "enter",
    "enter": "enter",
    "kp-enter": "keypad enter",
    "backspace": "backspace",
    "tab": "tab",
    "escape": "escape",
    "delete": "delete",
    "insert": "insert",
    "home": "home",
    "end": "end",
    "page_up": "page up",
    "page_down": "page down",
    "prior": "page up",
    "next": "page down",
    "up": "up",
    "down": "down",
    "left": "left",
    "right": "right",
    "shift": "shift",
    "control": "control",
    "alt": "alt",
    "super": "super",
    "hyper": "hyper",
    "meta": "meta",
    "caps_lock": "caps lock",
    "num_lock": "num lock",
    "pause": "pause",
    "print": "print screen",
    "menu": "menu",
    "double-quote": "double quote",
    "underscore": "underscore",
}


def char_words(text: str) -> str:
    """A single character as words: letters and digits as themselves, the rest by name."""
    if text == "space":
        return "space"
    if len(text) != 1:
        return text
    if text in CHARS:
        return CHARS[text]
    if text.isalnum():
        return text
    name = unicodedata.name(text, "")
    return name.lower() if name else text


def key_words(text: str) -> str:
    """A key name as words (``shift_a`` → "shift a", ``kp-enter`` → "keypad enter")."""
    lowered = text.lower()
    if lowered in KEYS:
        return KEYS[lowered]
    if len(text) == 1:
        return char_words(text)
    if "_" in text and not text.startswith("_"):
        return " ".join(key_words(part) for part in text.split("_") if part)
    return text.replace("-", " ")
