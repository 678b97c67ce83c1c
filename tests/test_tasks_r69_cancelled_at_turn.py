"""Review R69: a waiting call whose future was cancelled, popped at its turn before its caller
gave it up, leaves the nested indexes and takes back the class it lent right there.

A cancelled caller gives its place up (``abandon``) when its task next runs; until then the
dispatch, finding its future done at its turn, skips it. Until this fix it skipped it only: a
nested call it had lifted (priority inheritance, review R67) kept the lent class, and the next
slot of its limit went to it ahead of the calls queued before it that nobody urgent waited
behind any more; a cancelled nested call stayed in ``nested_waiting`` and its indexes. The closed
loop's drop (``_dropped``, review R69) did both; the cancelled future's skip now does the same.

Driven on one ``SharedLimits`` from the test's thread with real asyncio futures of a loop that
is not running: ``future.cancel()`` is what ``Task.cancel`` does to the future its task awaits,
and the task's own ``abandon`` has not run yet. The order of grants is recorded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from test_tasks_r67_priority_inversion import CLASSES

from agentgate.tasks import Scheduler, SchedulerConfig, SharedLimits, TenantShare, ToolCall
from agentgate.tasks._config import ToolLimits
from agentgate.tasks._waiter import Waiter

CONFIG = SchedulerConfig(
    tools={"a": ToolLimits(concurrency=2)},
    tenants={"u": TenantShare(concurrency=1)},
    priority_classes=CLASSES,
    default_priority="mid",
)


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    made = asyncio.new_event_loop()
    yield made
    made.close()


def _queue(
    limits: SharedLimits, loop: asyncio.AbstractEventLoop, call: ToolCall, parent: Waiter | None = None
) -> Waiter:
    tool_limits = limits.tool_limits(call.tool)
    started = limits.start_now(call, tool_limits, parent)
    if started is not None:
        return started
    metrics = Scheduler(limits=limits).metrics
    priority = limits.config.priority_class(call.priority)
    future = loop.create_future()
    return limits.enqueue(call, tool_limits, priority, False, future, metrics, loop, parent)


def test_a_cancelled_call_popped_at_its_turn_takes_back_the_class_it_lent(
    loop: asyncio.AbstractEventLoop,
) -> None:
    """Review R69: tool ``a`` (two slots) is held by two low calls of tenant ``t``; the first
    one's tool makes a nested call to ``b`` for tenant ``u``, whose one slot another call holds,
    behind three mid calls of ``u``. A high call queued for ``a`` lifts the nested call to high.
    Its future is cancelled; the second low call ends and the dispatch skips the high call at its
    turn. When ``u``'s slot comes free, the first mid call starts (until this fix: the nested
    call, still lifted, ahead of the three)."""
    limits = SharedLimits(CONFIG)
    with limits.lock:
        parent = _queue(limits, loop, ToolCall("a", tenant="t", priority="low", call_id="P"))
        other = _queue(limits, loop, ToolCall("a", tenant="t", priority="low", call_id="A2"))
        holder = _queue(limits, loop, ToolCall("c", tenant="u", call_id="U"))
        assert parent.granted and other.granted and holder.granted
        mids = [_queue(limits, loop, ToolCall("b", tenant="u", call_id=f"M{i}")) for i in range(3)]
        nested = _queue(limits, loop, ToolCall("b", tenant="u", priority="low", call_id="N"), parent)
        high = _queue(limits, loop, ToolCall("a", tenant="t", priority="high", call_id="H"))
        assert not nested.granted and not high.granted
        assert limits.queue.rank_of(nested) == CLASSES[0].rank  # lent by the high call
        high.future.cancel()  # its task's ``abandon`` has not run yet
        limits.finish(other)  # ``a`` has room: the high call's turn, skipped
        assert not high.granted
        assert limits.queue.rank_of(nested) == CLASSES[2].rank, "the skipped call's class still lent"
        limits.finish(holder)  # ``u`` has room: the fairest of its calls starts
        granted = [w.call.call_id for w in [*mids, nested] if w.granted]
        assert granted == ["M0"], granted
        limits.abandon(high)  # the cancelled task runs at last: nothing left to do
        assert limits.queue.rank_of(nested) == CLASSES[2].rank
    limits.close()


def test_a_cancelled_nested_call_popped_at_its_turn_leaves_the_nested_indexes(
    loop: asyncio.AbstractEventLoop,
) -> None:
    """Review R69: a nested call queued for ``b`` (tenant ``u`` full, its ancestor of tenant
    ``t`` cannot lend), a call of ``u`` queued behind it, is cancelled; when ``u``'s slot comes
    free the dispatch skips it at its turn and starts the call behind it. It is out of
    ``nested_waiting`` and every index then (until this fix it stayed, keeping its parent, until
    its task ran ``abandon``, or for good when that task never runs again: no later finish
    visits it while ``u``'s slot is taken again at once)."""
    limits = SharedLimits(CONFIG)
    with limits.lock:
        parent = _queue(limits, loop, ToolCall("a", tenant="t", call_id="P"))
        holder = _queue(limits, loop, ToolCall("c", tenant="u", call_id="U"))
        nested = _queue(limits, loop, ToolCall("b", tenant="u", call_id="N"), parent)
        behind = _queue(limits, loop, ToolCall("b", tenant="u", call_id="M"))
        assert not nested.granted and nested in limits.nested_waiting
        nested.future.cancel()
        limits.finish(holder)
        assert behind.granted and not nested.granted and not limits.queue.size
        assert not limits.nested_waiting
        assert not limits.nested_under and not limits.nested_by and not limits.nested_under_tool
        limits.abandon(nested)
        assert not limits.nested_waiting
    limits.close()
