"""Review R84: a datetime whose ``tzinfo.utcoffset()`` returns None is naive as Python defines it,
but the schedulers took any datetime with a ``tzinfo`` for an aware one: as a call's ``deadline``
or ``grant_expires_at`` it raised ``TypeError`` (naive minus aware) out of ``submit``, in both
schedulers. It is now the ``InputError`` a plain naive datetime gets (docs/tasks.md: both are aware
datetimes or Unix seconds). The audit's ``format_time`` had the same test, and wrote such a time
as if in the machine's zone where it promises ``InputError``. Real schedulers."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta, tzinfo

import pytest

from agentgate.audit.entry import format_time
from agentgate.errors import InputError
from agentgate.tasks import Attempt, Scheduler, SyncScheduler, ToolCall


class _NoOffset(tzinfo):
    """A zone that knows no offset: a datetime in it is naive."""

    def utcoffset(self, dt: datetime | None) -> timedelta | None:
        return None

    def dst(self, dt: datetime | None) -> timedelta | None:
        return None


NAIVE = datetime(2030, 1, 1, tzinfo=_NoOffset())
FIELDS = pytest.mark.parametrize("field", ["deadline", "grant_expires_at"])


def _ran(attempt: Attempt) -> str:
    return "ran"


async def _ran_async(attempt: Attempt) -> str:
    return "ran"


@FIELDS
def test_a_time_whose_zone_has_no_offset_is_refused_by_the_sync_scheduler(field: str) -> None:
    with SyncScheduler() as scheduler:
        with pytest.raises(InputError, match=rf"tool call {field} must be timezone-aware"):
            scheduler.submit(ToolCall("t", **{field: NAIVE}), _ran)
        assert scheduler.submit(ToolCall("t", **{field: datetime(2030, 1, 1, tzinfo=UTC)}), _ran) == "ran"


@FIELDS
def test_a_time_whose_zone_has_no_offset_is_refused_by_the_async_scheduler(field: str) -> None:
    async def main() -> None:
        scheduler = Scheduler()
        try:
            with pytest.raises(InputError, match=rf"tool call {field} must be timezone-aware"):
                await scheduler.submit(ToolCall("t", **{field: NAIVE}), _ran_async)
            assert scheduler.in_flight == 0
        finally:
            await scheduler.aclose()

    asyncio.run(main())


def test_the_audit_time_format_refuses_a_time_whose_zone_has_no_offset() -> None:
    with pytest.raises(InputError, match="timezone-aware"):
        format_time(NAIVE)
    assert format_time(datetime(2030, 1, 1, tzinfo=UTC)) == "2030-01-01T00:00:00.000000Z"
