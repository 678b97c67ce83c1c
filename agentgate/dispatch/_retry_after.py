"""A ``Retry-After`` header read as the seconds it asks for (``retry_after_s``), bounded by
``MAX_RETRY_AFTER_S``."""

from __future__ import annotations

import email.utils
import time
from datetime import UTC

MAX_RETRY_AFTER_S = 300.0
"""The longest a backend's ``Retry-After`` is honoured for (seconds): a longer one (an hour, a
date next year: a proxy's misconfiguration more likely than a plan) is taken as this, so that a
backend is tried again within five minutes whatever it said."""


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """The seconds a ``Retry-After`` header's ``value`` asks a client to wait, from ``now`` (Unix
    time; default: the time now): its delta-seconds (ASCII digits only, RFC 9110 10.2.3) or the
    time to its HTTP-date (0 for a date past), at most ``MAX_RETRY_AFTER_S``. ``None`` for no
    value or one of neither form: a negative or fractional number, garbage (ignored, never an
    error: the backend's failure stands without it). ``1*DIGIT`` allows leading zeros, which are
    dropped before the digits are measured (as ``Content-Length``'s, ``declared_length``): until
    review R89 ``0000000001`` (10 characters) was read as ``MAX_RETRY_AFTER_S``, holding the
    backend and every alias of its URL down 300 s where it asked for 1."""
    if value is None:
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():
        digits = text.lstrip("0") or "0"  # not read whole: ``int`` refuses over 4,300 digits
        return MAX_RETRY_AFTER_S if len(digits) > 9 else min(float(digits), MAX_RETRY_AFTER_S)
    if not text or text[0].isdigit() or text[0] in "+-":
        return None  # a number of another form (``-5``, ``1.5``) or nothing: no date either
    try:
        when = email.utils.parsedate_to_datetime(text)
        seconds = when.timestamp() if when.tzinfo is not None else when.replace(tzinfo=UTC).timestamp()
    except (TypeError, ValueError, OverflowError, IndexError):
        return None
    left = seconds - (time.time() if now is None else now)
    return min(max(0.0, left), MAX_RETRY_AFTER_S)
