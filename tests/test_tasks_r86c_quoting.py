"""A value the scheduler's checks refuse is quoted as ``quoted`` quotes it (at most 80 characters,
an integer past 128 bits by its size, a value nested too deep by its type): the classifier given
to ``Scheduler``, ``check_error_classes``, a ``RetryPolicy``'s ``retry_on``, every
``SchedulerConfig`` and ``ToolCall`` field. Until review R86c those refusals wrote the whole
``repr``: a bare ``ValueError`` for an integer past 4,300 digits, a ``RecursionError`` for a list
nested 100,000 deep, and 10 MB of message for 10 MB of text."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from test_tasks_r86b_classifier_quoting import BIG, _deep

from agentgate.errors import InputError, Overloaded
from agentgate.tasks import (
    Attempt,
    PriorityClass,
    RetryPolicy,
    Scheduler,
    SchedulerConfig,
    TenantShare,
    ToolCall,
    ToolLimits,
)

TEXT = "x" * 10_000_000


REFUSED: list[tuple[str, Callable[[], object], str]] = [
    (
        "classifier huge",
        lambda: Scheduler(SchedulerConfig(), classifier=BIG),
        "classifier must be a Classifier",
    ),  # type: ignore[arg-type]
    (
        "classifier text",
        lambda: Scheduler(SchedulerConfig(), classifier=TEXT),
        "classifier must be a Classifier",
    ),  # type: ignore[arg-type]
    (
        "classifier deep",
        lambda: Scheduler(SchedulerConfig(), classifier=_deep()),
        "classifier must be a Classifier",
    ),  # type: ignore[arg-type]
    ("declared as text", lambda: SchedulerConfig().check_error_classes(TEXT), "got the string"),
    (
        "retry_on entry",
        lambda: RetryPolicy(retry_on=[BIG]),
        "retry.retry_on entry must be a non-empty string",
    ),  # type: ignore[list-item]
    ("retry_on", lambda: RetryPolicy(retry_on=BIG), "retry.retry_on must be a tuple"),  # type: ignore[arg-type]
    ("retry_on deep", lambda: RetryPolicy(retry_on=_deep()), "retry.retry_on entry must be"),
    ("concurrency text", lambda: ToolLimits(concurrency=TEXT), "concurrency must be an integer"),  # type: ignore[arg-type]
    ("rate", lambda: ToolLimits(rate=BIG), "rate must be a RateLimit"),  # type: ignore[arg-type]
    ("tenant share", lambda: SchedulerConfig(tenants={TEXT: BIG}), "tenants\\["),  # type: ignore[dict-item]
    ("tool limits", lambda: SchedulerConfig(tools={TEXT: _deep()}), "tools\\["),  # type: ignore[dict-item]
    ("priority classes", lambda: SchedulerConfig(priority_classes=BIG), "priority_classes must be"),  # type: ignore[arg-type]
    ("default priority", lambda: SchedulerConfig(default_priority=BIG), "default_priority"),  # type: ignore[arg-type]
    ("priority class weight", lambda: PriorityClass(TEXT, weight=-1), "weight must be > 0"),
    ("unknown priority", lambda: SchedulerConfig().priority_class(TEXT), "unknown priority class"),
    ("tool name", lambda: ToolCall(BIG), "needs a tool name"),  # type: ignore[arg-type]
    ("tenant", lambda: ToolCall("t", tenant=_deep()), "tenant and principal must be strings"),  # type: ignore[arg-type]
    ("run id", lambda: ToolCall("t", run_id=BIG), "must be strings or None"),  # type: ignore[arg-type]
    ("chain", lambda: ToolCall("t", authority_chain=BIG), "authority_chain must be a tuple"),  # type: ignore[arg-type]
    ("chain id", lambda: ToolCall("t", authority_chain=[BIG]), "authority_chain holds ids"),  # type: ignore[list-item]
    ("pauses", lambda: ToolCall("t", pauses=TEXT), "pauses must be a function"),  # type: ignore[arg-type]
    ("deadline", lambda: ToolCall("t", deadline=TEXT), "deadline must be an aware datetime"),  # type: ignore[arg-type]
    ("lone surrogate", lambda: ToolCall("t", call_id="\udcff" + TEXT), "is not valid Unicode"),
]


@pytest.mark.parametrize(("make", "message"), [(m, s) for _, m, s in REFUSED], ids=[n for n, _, _ in REFUSED])
def test_a_hostile_value_is_refused_as_an_input_error_of_a_line(
    make: Callable[[], object], message: str
) -> None:
    with pytest.raises(InputError, match=message) as caught:
        make()
    assert len(str(caught.value)) < 400
    assert "\n" not in str(caught.value)


def test_a_huge_integer_is_named_by_its_size() -> None:
    with pytest.raises(InputError, match=r"got an integer of \d+ bits$"):
        Scheduler(SchedulerConfig(), classifier=BIG)  # type: ignore[arg-type]
    with pytest.raises(
        InputError, match=r"retry_on entry must be a non-empty string, got an integer of \d+ bits$"
    ):
        RetryPolicy(retry_on=[BIG])  # type: ignore[list-item]


def test_a_short_value_is_still_quoted_whole() -> None:
    with pytest.raises(InputError, match="unknown priority class 'urgent'; known: "):
        SchedulerConfig().priority_class("urgent")
    with pytest.raises(InputError, match=r"tools\['t'\] must be a ToolLimits, got 3$"):
        SchedulerConfig(tools={"t": 3})  # type: ignore[dict-item]


async def test_a_queue_full_refusal_quotes_a_long_tenant_short() -> None:
    tenant = "t" * 1_000_000
    scheduler = Scheduler(SchedulerConfig(max_concurrency=1, max_queued=0, tenants={tenant: TenantShare()}))
    release = asyncio.Event()

    async def held(_attempt: Attempt) -> str:
        await release.wait()
        return "ran"

    try:
        first = asyncio.ensure_future(scheduler.submit(ToolCall("t", tenant=tenant), held))
        while scheduler.in_flight == 0:
            await asyncio.sleep(0)
        with pytest.raises(Overloaded, match="queue full for tenant 'tttt") as caught:
            await scheduler.submit(ToolCall("t", tenant=tenant), held)
        assert len(str(caught.value)) < 400
        release.set()
        assert await first == "ran"
    finally:
        await scheduler.aclose()
