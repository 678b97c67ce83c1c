"""What messages quote: file names as one line, each unprintable character escaped once, a
character refused in typed text named as what it is, with its code point, and a wrong
argument by its type (``shown``).

Below ``errors``, ``findings``, ``keys``, ``capabilities`` and the CLI, which all quote file
names (a policy, a key file) or refuse characters in text that reaches terminals and logs, so
that none of them imports another for it."""

from __future__ import annotations

import os
import unicodedata
from datetime import timedelta

_UNPRINTABLE = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})

_BIDI_CONTROLS = frozenset(
    "\u061c\u200e\u200f" + "".join(map(chr, range(0x202A, 0x202F))) + "".join(map(chr, range(0x2066, 0x206A)))
)
"""The marks, embeddings, overrides and isolates that reorder the text around them (Unicode
Standard Annex #9): ALM, LRM, RLM, LRE..RLO (U+202A..U+202E), LRI..PDI (U+2066..U+2069)."""


def not_printable(char: str) -> bool:
    """Whether ``char`` is a control, format, surrogate or line/paragraph-separator character: one
    that can break a line, move the cursor, reorder text (bidi overrides) or hide in it."""
    return unicodedata.category(char) in _UNPRINTABLE


def character_named(char: str) -> str:
    """What a ``not_printable`` character is, for the error that refuses it, with its code point:
    ``control character '\\x1b' (U+001B)``, ``bidirectional-text control character U+202E``,
    ``invisible format character U+200B``, ``line separator U+2028``; a byte that is not UTF-8
    (which ``os.fsdecode`` and the CLI's ``text`` keep as ``\\udcXX``) is named as that byte."""
    code = f"U+{ord(char):04X}"
    if "\udc80" <= char <= "\udcff":
        return f"a byte that is not UTF-8 (0x{ord(char) - 0xDC00:02x})"
    if char in _BIDI_CONTROLS:
        return f"bidirectional-text control character {code}"
    category = unicodedata.category(char)
    if category == "Cc":
        return f"control character {char!r} ({code})"
    named = {
        "Cf": "invisible format character",
        "Cs": "lone surrogate (half of a UTF-16 pair, not Unicode text)",
        "Zl": "line separator",
        "Zp": "paragraph separator",
    }
    return f"{named.get(category, 'character')} {code}"


def shown_path(path: object) -> str:
    """``path`` as an error message quotes it: one line that a terminal or a log shows as it is,
    each character that is not printable (a line break, an escape, a bidi override, a byte of the
    name that is not UTF-8) written as its backslash escape. A backslash stays as it is, so the
    CLI, which escapes the same characters in every error line (``cli._lines.one_line``), shows
    each escape once."""
    return escaped(os.fsdecode(path) if isinstance(path, str | bytes | os.PathLike) else str(path))


def escaped(text: str) -> str:
    """``text`` with each character that is not printable (a line break, an escape, a bidi
    override, a NUL) written as its backslash escape, and the rest as it is: what a message
    quoting text from outside (a file name, a backend's error body) shows on one line."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def bounded(text: str, limit: int) -> str:
    """``text``, or past ``limit`` characters its first two thirds and its last third of them
    (the end of an error often says what is wrong) around how many were left out: an error that
    quotes a key or a value of a file, which may be megabytes long, stays short."""
    if len(text) <= limit:
        return text
    head, tail = limit * 2 // 3, limit // 3
    return f"{text[:head]} ...({len(text) - head - tail} characters left out)... {text[-tail:]}"


def shown(value: object) -> str:
    """What a wrong argument was, for an error message: a number, a time span or ``None`` as
    itself; anything else by its type only (text or bytes may be a key or a token)."""
    if value is None or isinstance(value, int | float | timedelta):
        return quoted(value)
    return f"a {type(value).__name__}"


def quoted(value: object, limit: int = 80) -> str:
    """``value`` as a refusal quotes it: its ``repr``, at most ``limit`` characters (cut with
    ``...``); an integer past 128 bits by its size. Python refuses to write an integer of more
    than 4,300 digits, alone or inside a container: a refusal quoting one (a store's count, an
    argument name or an operator given as ``10**5000``) was itself a bare ``ValueError`` until
    reviews R57 and R83; one quoting a rejected value of 10 MB held all of it. A value nested
    deeper than Python's recursion limit (a list in a list, 200,000 deep), or whose ``repr``
    raises anything else, is quoted by its type: until review R85b the first was a bare
    ``RecursionError`` out of the refusal (``BudgetLedger.usage``'s grant id check,
    ``DeadLetterStore.record``'s letter id), and the second that ``repr``'s exception."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"
    try:
        text = repr(value)
    except RecursionError:
        return f"a {type(value).__name__} nested too deep to write"
    except Exception as exc:  # a __repr__ of the caller's own that fails: the refusal must still say what
        if isinstance(exc, ValueError) and "integer string conversion" in str(exc):  # past 4,300 digits
            return f"a {type(value).__name__} holding an integer too long to write"
        return f"a {type(value).__name__} that cannot be written"
    return text if len(text) <= limit else text[: limit - 3] + "..."
