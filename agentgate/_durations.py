"""Durations as the command line writes them (``--ttl 1h30m``): one reading, shared by the verbs
that take one and by the policy loader's hint for a unit written in a field of seconds (review
R73: the loader had a pattern of its own, which read neither sums nor the range)."""

from __future__ import annotations

import re
from itertools import pairwise

from agentgate.errors import InputError

_DURATION = re.compile(r"(?:[0-9]{1,9}[smhd])+")
LONG_DURATION = re.compile(r"(?:[0-9]+[smhd])+")  # well formed, numbers of any length
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
MAX_TTL_S = 10 * 365 * 86_400
"""Longest lifetime or window a policy may name, and the longest duration the command line reads:
ten years. Here, not in the policy schema, so that reading ``--ttl`` imports no Pydantic model
(until review R81 every ``grant issue`` and ``grant delegate`` imported the whole schema for it)."""


def parse_duration(text: str) -> int:
    """Seconds in ``30s``, ``15m``, ``1h``, ``7d`` or a sum like ``1h30m`` (each unit at most once,
    largest first: ``1h1h`` and ``30m1h`` are refused); zero, negative or more than ten years of
    365 days (315,360,000 s: the longest lifetime a policy may hold too) is refused with
    ``InputError``, and so is a number of more than 9 digits: said to be too long, or, where only
    leading zeros take it past 9 (``0000000001h``), told the value to write (``1h``)."""
    written = text
    if isinstance(text, str) and LONG_DURATION.fullmatch(text) and not _DURATION.fullmatch(text):
        _units_in_order(text)
        text = _LEADING_ZEROS.sub("", text)
        if not _DURATION.fullmatch(text):
            # Well formed, with a number of ten digits or more, leading zeros aside (99999999999d):
            # at least 10**9 s, so said to be too long, not malformed (until review R55), and
            # never converted (a number of any length).
            raise InputError(
                f"duration {_shown(written)} must be more than zero and at most 10 years ({MAX_TTL_S}s); "
                "write each number in at most 9 digits"
            )
    seconds = duration_seconds(text)
    if seconds <= 0 or seconds > MAX_TTL_S:
        raise InputError(
            f"duration {_shown(written)} must be more than zero and at most 10 years ({MAX_TTL_S}s)"
        )
    if text != written:
        # Padded past 9 digits with leading zeros (0000000001h): until review R89 said to be
        # longer than 10 years, which it is not. The grammar's 9 digits hold, as an AMOUNT's 19
        # do: told the value to write, which is taken.
        raise InputError(
            f"duration {_shown(written)} has a number of more than 9 digits, leading zeros "
            f"included: write it without them, {text}"
        )
    return seconds


_MAX_DURATION_TEXT = 40
"""Longest duration ``duration_seconds`` converts, as long as four units of 9 digits each (all
``parse_duration`` reads): a number of thousands of digits would be a bare ``ValueError``."""


def duration_seconds(text: str) -> int:
    """Seconds in a duration written as ``parse_duration`` reads it, of any size and zero
    included, up to ``_MAX_DURATION_TEXT`` characters: what the policy loader's hint for a field of
    seconds converts, that field's own bounds then applying (until review R86 the hint applied a
    lifetime's range to every field, ``timeout_s`` too). ``InputError`` for text that is no
    duration, whose units repeat or are out of order, or that is longer."""
    if not isinstance(text, str) or not LONG_DURATION.fullmatch(text):
        raise InputError(
            f"duration {_shown(text)}: write a positive whole number with a unit s, m, h or d (e.g. 15m, 7d)"
        )
    parts = _units_in_order(text)
    if len(text) > _MAX_DURATION_TEXT:
        raise InputError(
            f"duration {_shown(text)} is {len(text)} characters long, more than {_MAX_DURATION_TEXT}"
        )
    return sum(int(n) * _UNITS[u] for n, u in parts)


_LEADING_ZEROS = re.compile(r"(?<![0-9])0+(?=[0-9])")
"""The leading zeros of each number of a duration (``007h`` is ``7h``; ``0h`` keeps its one)."""


def _units_in_order(text: str) -> list[tuple[str, str]]:
    """The numbers and units of the well-formed duration ``text``; ``InputError`` where a unit
    comes more than once or out of order (``1h1h``, ``30m1h``)."""
    parts = re.findall(r"([0-9]+)([smhd])", text)
    units = [u for _, u in parts]
    if any(_UNITS[a] <= _UNITS[b] for a, b in pairwise(units)):
        # 1h1h, 30m1h: a slip (a value pasted twice, a unit mistyped) more likely than a sum meant,
        # in a grant's lifetime; refused, as Prometheus durations are (read as a sum until review R55).
        repeated = next((u for u in units if units.count(u) > 1), None)
        what = f"the unit {repeated} comes more than once" if repeated else "its units are out of order"
        raise InputError(
            f"duration {_shown(text)}: {what}; write each unit at most once, largest first (d, h, m, s), e.g. 1h30m"
        )
    return parts


def _shown(text: object) -> str:
    """A duration as its refusal quotes it: at most 40 characters of it."""
    return repr(text[:40]) + ("..." if len(text) > 40 else "") if isinstance(text, str) else repr(text)
