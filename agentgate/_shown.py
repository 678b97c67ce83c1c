"""File names as messages quote them: one line, each unprintable character escaped once.

Below ``errors``, ``findings`` and ``keys``, which all quote file names (a policy, a key file)
in text that reaches terminals and logs, so that none of them imports another for it."""

from __future__ import annotations

import os


def shown_path(path: object) -> str:
    """``path`` as an error message quotes it: one line that a terminal or a log shows as it is,
    each character that is not printable (a line break, an escape, a bidi override, a byte of the
    name that is not UTF-8) written as its backslash escape. A backslash stays as it is, so the
    CLI, which escapes the same characters in every error line (``cli.main._one_line``), shows
    each escape once."""
    text = os.fsdecode(path) if isinstance(path, str | bytes | os.PathLike) else str(path)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)
