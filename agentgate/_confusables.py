"""Unicode's confusables (TR39, "Unicode Security Mechanisms", section 4): ``skeleton`` and
``reads_alike``, for names a reader may take for one another (a Cyrillic ``асе`` for ``ace``,
``rnallory`` for ``mallory``).

The data is Unicode's ``confusables.txt``, version 13.0.0, shipped unchanged beside this module
(``_confusables.txt``, SHA-256 ``96f2500e...a333aa206``), under the Unicode License (its header
names the terms; https://www.unicode.org/license.txt). It is read from the package, never the
network, once per process and only when a name needs it. Written here rather than taken from a
library: no package on PyPI both implements TR39's skeleton as specified and is kept up
(``confusable-homoglyphs`` keeps pairs without the mapping's direction, ``confusables`` and
``disarm`` fold differently from TR39, PyICU needs ICU built on the machine); the skeleton is
three lines over the table. To update, replace the file with a newer ``confusables.txt`` from
Unicode's security data and its digest here.
"""

from __future__ import annotations

import functools
import unicodedata
from bisect import bisect_right
from importlib import resources

from agentgate._unicode13 import ASSIGNED

_TABLE_FILE = "_confusables.txt"
TABLE_VERSION = "13.0.0"
"""The Unicode version of the table: what ``newer_than_table`` compares a name's characters with."""


@functools.cache
def _table() -> dict[int, str]:
    """Each source character's prototype, from ``confusables.txt`` (``SOURCE ; TARGET ; MA``)."""
    text = resources.files("agentgate").joinpath(_TABLE_FILE).read_text(encoding="utf-8-sig")
    table: dict[int, str] = {}
    for line in text.splitlines():
        data = line.partition("#")[0].strip()
        if not data:
            continue
        source, target, *_ = (field.strip() for field in data.split(";"))
        table[int(source, 16)] = "".join(chr(int(point, 16)) for point in target.split())
    return table


@functools.cache
def _ascii_table() -> dict[int, str]:
    """The table's entries for ASCII sources (``1`` and ``I`` to ``l``, ``0`` to ``O``, ``m`` to
    ``rn``...): an ASCII name's skeleton is one ``str.translate`` with it (its NFD is itself)."""
    return {source: target for source, target in _table().items() if source < 0x80}


def skeleton(text: str) -> str:
    """TR39's skeleton of ``text``: NFD, each character replaced by its prototype, NFD again. Two
    strings are confusable when their skeletons are equal; the skeleton is a key to compare,
    never a name to show."""
    if text.isascii():
        return unicodedata.normalize("NFD", text.translate(_ascii_table()))
    table = _table()
    mapped = "".join(table.get(ord(char), char) for char in unicodedata.normalize("NFD", text))
    return unicodedata.normalize("NFD", mapped)


@functools.lru_cache(maxsize=4096)
def readings(name: str) -> frozenset[str]:
    """How ``name`` reads, as keys to compare: the skeleton of its NFKC form (full-width letters
    as plain ones) case folded, before and after the skeleton (``АСЕ`` in Cyrillic, ``ACE`` and
    ``ace`` read alike; so do ``ALICE`` and ``alice``, whose ``I`` a skeleton takes for ``l``, and
    ``Ill`` and ``lll``, ``0`` and ``o``, ``m`` and ``rn``). Two names read alike when they share
    a key; not transitively: ``bobI`` reads as ``bobi`` and as ``bobl``, which read apart. A set,
    whose order each process's hash seed sets: a caller that names one of several names read as
    takes them in an order of its own (code point order; a Gate's free names, the first granted,
    as ``AgentNames.claim``). Kept for the last 4096 names: a decision for a name seen
    before computes nothing."""
    plain = unicodedata.normalize("NFKC", name)
    return frozenset({skeleton(plain.casefold()), skeleton(skeleton(plain).casefold())})


@functools.cache
def _assigned_bounds() -> tuple[int, ...]:
    """The code points assigned in ``TABLE_VERSION`` (``_unicode13.ASSIGNED``) as half-open
    bounds ``(start, end, start, end, ...)``: a code point is assigned when ``bisect_right``
    puts it at an odd index."""
    bounds: list[int] = []
    for span in ASSIGNED.split():
        start, _, end = span.partition("-")
        bounds += (int(start, 16), int(end or start, 16) + 1)
    return tuple(bounds)


def newer_than_table(text: str) -> str | None:
    """The first character of ``text`` that Unicode assigned after ``TABLE_VERSION``, in words
    (``U+A7C1 LATIN SMALL LETTER OLD POLISH O at character 4``), else ``None``. The table has
    no entry for such a character whatever it looks like, so what a name holding it reads as
    is unknown (the running Python's ``unicodedata`` is newer: 14.0.0 on 3.11, 15.1.0 on
    3.13). Characters assigned by then read alike under every later version: Unicode keeps
    their normalization and case folding stable. ASCII text is answered without a look-up;
    else one binary search (about ten comparisons) per character."""
    if text.isascii():
        return None
    bounds = _assigned_bounds()
    for at, char in enumerate(text):
        if bisect_right(bounds, ord(char)) % 2 == 0:
            named = unicodedata.name(char, "an unnamed character")
            return f"U+{ord(char):04X} {named} at character {at + 1}"
    return None


def reads_alike(first: str, second: str) -> bool:
    """Whether ``first`` and ``second`` read as one name (``readings``: they share a key)."""
    return not readings(first).isdisjoint(readings(second))
