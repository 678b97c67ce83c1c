"""Times as people read them: UTC to the second (docs/cli.md, Output conventions)."""

from __future__ import annotations

from datetime import UTC, datetime

from agentgate._numbers import finite

LATEST_EXPIRY = 10**11
"""The latest expiry of an approval request, in Unix seconds (the year 5138; a Gate writes none
later than ten years from now): what ``ApprovalStore.request`` stores and ``approval sign`` signs
is below it, a time every reader shows as a date."""


def utc_text(seconds: float) -> str | None:
    """A Unix time as ``2026-11-29T18:00:00Z``, the year in four digits (``0001-01-01T00:00:00Z``:
    glibc's ``%Y`` does not pad, so until review R86 years 1 to 999 were written ``1-01-01...``,
    no RFC 3339 time); ``None`` beyond the years a datetime can hold."""
    try:
        moment = datetime.fromtimestamp(seconds, UTC)
    except (OverflowError, ValueError, OSError):
        return None
    # The idiom of the audit log's ``format_time`` (there to the microsecond): ``isoformat``
    # writes the year in four digits.
    return moment.replace(tzinfo=None).isoformat(timespec="seconds") + "Z"


def when(seconds: int) -> str:
    """A time in a message a person acts on (a finding, an error): UTC to the second, or the Unix
    seconds as given when no calendar date holds them (a hostile token's ``exp`` of 2**62)."""
    return utc_text(seconds) or f"{seconds} (Unix seconds)"


def unix(timestamp: float | None) -> int | float | None:
    """A time for JSON output and approval payloads (docs/cli.md, Output conventions): Unix
    seconds, as an integer when it is whole seconds (``1795969091``, as the Gate and grants write
    times, not ``1795969091.0``), else with its fraction as recorded; ``None`` (``null``) for none or a
    non-finite one (a deadline of infinity), and for an integer past a float's range, as for
    infinity (a row edited by hand: until review R84 an ``OverflowError`` traceback)."""
    if not finite(timestamp):
        return None
    seconds = float(timestamp)
    return int(timestamp) if seconds.is_integer() else seconds
