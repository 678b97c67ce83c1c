"""Review R87c: R87b made ``Gate.run`` and ``SyncScheduler`` refuse, after the work had started,
an ``fn`` result that merely defines ``__await__``: a handle a sync caller uses (``ray.ObjectRef``,
a ``dask.distributed.Future``) was recorded as an ``error``, charged as reserved, a once-only
tool refused ever after, and the handle the caller needs to get or cancel the work lost. Now only
a body that never began (a coroutine, a generator-based coroutine, an async generator) is
refused; any other awaitable is the call's result, recorded ``ok``, as before R87b.

Real components: a Gate on a SQLite file (``test_gate``'s policy; ``refund`` runs once, ``small``
costs 1 micro-dollar a prompt token and 2 an output token), a ``SyncScheduler``."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Generator, Iterator
from typing import Any

import pytest
from test_gate import Setup
from test_gate import setup as setup  # the fixture

from agentgate.capabilities import Call
from agentgate.tasks import SyncScheduler, ToolCall


class _ObjectRef:
    """Shaped as ``ray.ObjectRef``: ``result()`` for a sync caller, ``__await__`` for an async one."""

    def __init__(self, future: concurrent.futures.Future[str]) -> None:
        self.future = future

    def result(self) -> str:
        return self.future.result()

    def __await__(self) -> Generator[Any, Any, str]:
        raise AssertionError("never awaited by a sync caller")


@pytest.fixture
def pool() -> Iterator[concurrent.futures.ThreadPoolExecutor]:
    with concurrent.futures.ThreadPoolExecutor(1) as made:
        yield made


def test_a_model_call_returning_a_handle_returns_it_recorded_ok(
    setup: Setup, pool: concurrent.futures.ThreadPoolExecutor
) -> None:
    auth = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(10, 10))
    ref = setup.gate.run(auth, lambda: _ObjectRef(pool.submit(lambda: "trained")), spent=lambda _: (5, 5))
    assert ref.result() == "trained"  # until R87c: InputError, the handle lost
    outcome = setup.entries()[-1]
    assert outcome.status == "ok" and outcome.budget_delta == 15


def test_a_once_only_tool_call_returning_a_handle_returns_it_recorded_ok(
    setup: Setup, pool: concurrent.futures.ThreadPoolExecutor
) -> None:
    auth = setup.gate.authorize(setup.agent, Call.tool("refund", {"amount": 50}), call_id="c1")
    ref = setup.gate.run(auth, lambda: _ObjectRef(pool.submit(lambda: "refunded")), call_id="c1")
    assert ref.result() == "refunded"
    assert setup.entries()[-1].status == "ok"


def test_a_sync_scheduler_returns_a_handle_as_the_result(pool: concurrent.futures.ThreadPoolExecutor) -> None:
    with SyncScheduler() as scheduler:
        ref = scheduler.submit(ToolCall("t"), lambda _: _ObjectRef(pool.submit(lambda: "ran")))
    assert ref.result() == "ran"
