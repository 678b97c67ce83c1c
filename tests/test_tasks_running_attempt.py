"""Performance round p3: what nested calls see while the sync scheduler runs an attempt.

The async core restores its running-attempt context variable by setting the value read before
the attempt instead of ``reset(token)``; the sync scheduler keeps ``reset`` (a second ``set``
would allocate a Token per attempt and save nothing there: docs/langgraph.md, tenth pass). Either
way nested calls must see their parent, and nothing must stay marked after a call, in direct mode
(no store) and in handed mode (a store: the loop thread hands each attempt to the caller's
thread)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from agentgate.store._sqlite import SQLiteStore
from agentgate.tasks import Attempt, RetryPolicy, SchedulerConfig, SyncScheduler, ToolCall, ToolLimits
from agentgate.tasks._waiter import RUNNING


def _call(tool: str, **arguments: object) -> ToolCall:
    return ToolCall(tool, arguments=dict(arguments), deadline=time.time() + 3.0)


@pytest.mark.parametrize("with_store", [False, True], ids=["direct", "handed"])
def test_sync_running_attempt_is_restored_after_each_call_and_attempt(
    tmp_path: Path, with_store: bool
) -> None:
    """Two nested calls in a row, the first retried once, run under the parent's slot at
    concurrency 1 (so each saw its parent as running) and leave the parent marked as running
    after them; outside any call nothing is marked, also after a call that failed."""
    config = SchedulerConfig(
        tools={"a": ToolLimits(concurrency=1, retry=RetryPolicy(attempts=2, backoff_initial_s=0.0))},
    )
    store = SQLiteStore(tmp_path / "s.db") if with_store else None
    try:
        with SyncScheduler(config, store=store) as scheduler:
            seen: list[bool] = []
            failures = [1]

            def flaky(attempt: Attempt) -> str:
                if failures:
                    failures.pop()
                    raise ConnectionRefusedError("first attempt")  # transient: retried
                return f"inner{attempt.number}"

            def parent(attempt: Attempt) -> list[str]:
                mine = RUNNING.get()
                assert mine is not None
                first = scheduler.submit(_call("a", level=2), flaky)
                seen.append(RUNNING.get() is mine)
                second = scheduler.submit(_call("a", level=3), lambda _: "inner")
                seen.append(RUNNING.get() is mine)
                return [first, second]

            assert RUNNING.get() is None
            assert scheduler.submit(_call("a", level=1), parent) == ["inner2", "inner"]
            assert seen == [True, True]
            assert RUNNING.get() is None

            def fails(_attempt: Attempt) -> None:
                raise ValueError("not retried")

            with pytest.raises(ValueError):
                scheduler.submit(_call("a"), fails)
            assert RUNNING.get() is None
            # the slot was released each time: another call runs at concurrency 1
            assert scheduler.submit(_call("a", level=4), lambda _: "after") == "after"
    finally:
        if store is not None:
            store.close()
