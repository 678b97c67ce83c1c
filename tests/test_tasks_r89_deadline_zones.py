"""Review R89: a ``ToolCall`` took any datetime as its ``deadline`` or ``grant_expires_at``. One
whose zone gives an offset ``datetime`` refuses (a day or more) made both schedulers' ``submit``
raise a bare ``ValueError``, one whose zone's ``utcoffset`` raises passed that error through, and a
naive one was refused only at ``submit`` while NaN was refused when the call was made. Each is now
an ``InputError`` naming the field when the call is made (docs/tasks.md, "Deadlines and
cancellation"); an aware datetime is taken as before."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, tzinfo

import pytest

from agentgate.errors import InputError
from agentgate.tasks import Attempt, Scheduler, SyncScheduler, ToolCall


class _DayAndMore(tzinfo):
    """A zone ahead of UTC by more than ``datetime`` allows."""

    def utcoffset(self, dt: datetime | None) -> timedelta:
        return timedelta(hours=30)

    def dst(self, dt: datetime | None) -> timedelta | None:
        return None


class _Broken(tzinfo):
    """A zone whose offset cannot be read."""

    def utcoffset(self, dt: datetime | None) -> timedelta:
        raise RuntimeError("zone database unavailable")

    def dst(self, dt: datetime | None) -> timedelta | None:
        return None


FIELDS = pytest.mark.parametrize("field", ["deadline", "grant_expires_at"])
BAD_ZONES = pytest.mark.parametrize(
    ("zone", "why"),
    [(_DayAndMore(), "ValueError: offset must be a timedelta"), (_Broken(), "RuntimeError: zone database")],
    ids=["offset-out-of-range", "offset-raises"],
)


@FIELDS
@BAD_ZONES
def test_a_time_in_a_zone_without_a_valid_offset_is_refused_when_the_call_is_made(
    field: str, zone: tzinfo, why: str
) -> None:
    with pytest.raises(InputError, match=rf"tool call {field} must be an aware datetime.*\({why}"):
        ToolCall("t", **{field: datetime(2030, 1, 1, tzinfo=zone)})


@FIELDS
def test_a_naive_time_is_refused_when_the_call_is_made(field: str) -> None:
    with pytest.raises(
        InputError, match=rf"tool call {field} must be timezone-aware, got 2030-01-01T00:00:00$"
    ):
        ToolCall("t", **{field: datetime(2030, 1, 1)})


@FIELDS
def test_an_aware_time_is_taken_by_both_schedulers(field: str) -> None:
    call = ToolCall("t", **{field: datetime.now(UTC) + timedelta(minutes=5)})

    def ran(attempt: Attempt) -> str:
        return "ran"

    async def ran_async(attempt: Attempt) -> str:
        return "ran"

    async def main() -> str:
        scheduler = Scheduler()
        try:
            return await scheduler.submit(call, ran_async)
        finally:
            await scheduler.aclose()

    with SyncScheduler() as scheduler:
        assert scheduler.submit(call, ran) == "ran"
    assert asyncio.run(main()) == "ran"
