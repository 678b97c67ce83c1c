"""Review R87b: R87 caught an ``fn`` of ``Gate.run`` that returns a coroutine, but only that: an
async generator function, a ``@types.coroutine`` function (a generator flagged as a coroutine)
or a function returning another awaitable ran none of its work under ``run``, yet a model call
was recorded ``ok`` and charged, and the scheduler under a tool call (which checked for a
coroutine only) returned it as the tool's result, a once-only refund recorded as run. Now what is
awaitable or an async generator is caught, by the Gate and by ``SyncScheduler`` alike
(``tasks._call.unawaited``): a body that never began (an async generator, a generator-based
coroutine, a coroutine) is a call that never started, as R87 made a coroutine. (R87b also refused any other
awaitable, a task, a future, an object with ``__await__``, after its work was set going; review
R87c returns it as the call's result again, recorded ``ok``: test_gate_r87c_run_handle.) A
``spent`` or ``failed`` returning such work is one that raised, as R87 made one returning a
coroutine.

Real components: a Gate on a SQLite file (``test_gate``'s policy; ``refund`` runs once, ``small``
costs 1 micro-dollar a prompt token and 2 an output token), ``SyncScheduler``s with and without
a store."""

from __future__ import annotations

import asyncio
import inspect
import types
from collections.abc import AsyncIterator, Callable, Generator
from pathlib import Path
from typing import Any

import pytest
from test_gate import Setup
from test_gate import setup as setup  # the fixture

from agentgate.capabilities import Call
from agentgate.errors import InputError
from agentgate.gate import Authorization
from agentgate.store import SQLiteStore
from agentgate.tasks import Attempt, SyncScheduler, ToolCall

made: list[Generator[Any, Any, Any]] = []


async def _answers() -> AsyncIterator[str]:
    yield "answer"


@types.coroutine
def _generator_coroutine() -> Generator[Any, Any, str]:
    yield
    return "answer"


def _kept_generator() -> Any:
    generator = _generator_coroutine()
    made.append(generator)  # type: ignore[arg-type]
    return generator


class _Awaitable:
    def __await__(self) -> Generator[Any, Any, str]:
        yield from asyncio.sleep(0).__await__()
        return "answer"


NOT_BEGUN: list[Callable[[], Any]] = [_answers, _kept_generator]
NOT_BEGUN_IDS = ["async-generator-function", "types.coroutine-function"]


def _model(setup: Setup) -> Authorization:
    return setup.gate.authorize(setup.agent, Call.model("small"), tokens=(10, 10))


def _refund(setup: Setup) -> Authorization:
    return setup.gate.authorize(setup.agent, Call.tool("refund", {"amount": 50}), call_id="c1")


@pytest.mark.parametrize("fn", NOT_BEGUN, ids=NOT_BEGUN_IDS)
def test_a_model_call_whose_body_never_began_is_settled_as_never_started(
    setup: Setup, fn: Callable[[], Any]
) -> None:
    with pytest.raises(
        InputError, match=r"model:small: Gate\.run called an async function, whose body never ran"
    ):
        setup.gate.run(_model(setup), fn, spent=lambda _: (10, 10))
    outcome = setup.entries()[-1]
    assert outcome.status == "error" and outcome.budget_delta == 0
    assert outcome.reasons[0].startswith("InputError: given up before the call started")
    assert len(made) == (fn is _kept_generator)  # else the check below passes on nothing
    assert all(inspect.getgeneratorstate(g) == inspect.GEN_CLOSED for g in made)


@pytest.mark.parametrize("fn", NOT_BEGUN, ids=NOT_BEGUN_IDS)
def test_a_once_only_tool_call_whose_body_never_began_is_left_to_run(
    setup: Setup, fn: Callable[[], Any]
) -> None:
    with pytest.raises(InputError, match="a SyncScheduler called an async function, whose body never ran"):
        setup.gate.run(_refund(setup), fn, call_id="c1")
    outcome = setup.entries()[-1]
    assert outcome.status == "error" and outcome.reasons[0].startswith(
        "InputError: given up before the call started"
    )
    again = _refund(setup)
    assert again.allowed, again.reasons
    assert setup.gate.run(again, lambda: "refunded", call_id="c1") == "refunded"


@pytest.mark.parametrize("name", ["spent", "failed"])
def test_a_callback_that_returns_an_awaitable_is_one_that_raised(setup: Setup, name: str) -> None:
    callback = {name: lambda _: _Awaitable()}
    with pytest.raises(InputError, match=f"{name} returned a _Awaitable, which is never awaited"):
        setup.gate.run(_model(setup), lambda: "answer", **callback)  # type: ignore[arg-type]
    assert setup.entries()[-1].status == "error"


@pytest.mark.parametrize("with_store", [False, True], ids=["direct", "handed"])
@pytest.mark.parametrize(
    ("tool", "generators"),
    [(lambda _: _answers(), 0), (lambda _: _kept_generator(), 1)],
    ids=["async-generator", "types.coroutine"],
)
def test_a_sync_scheduler_refuses_async_work_as_a_result(
    tmp_path: Path, with_store: bool, tool: Callable[[Attempt], Any], generators: int
) -> None:
    store = SQLiteStore(tmp_path / "s.db") if with_store else None
    try:
        with SyncScheduler(store=store) as scheduler:
            with pytest.raises(
                InputError, match="a SyncScheduler called an async function, whose body never ran"
            ):
                scheduler.submit(ToolCall("t"), tool)
            assert scheduler.submit(ToolCall("t"), lambda _: "ran") == "ran"  # no slot kept
    finally:
        if store is not None:
            store.close()
    assert len(made) == generators  # else the check below passes on nothing
    assert all(inspect.getgeneratorstate(g) == inspect.GEN_CLOSED for g in made)


@pytest.fixture(autouse=True)
def _forget_generators() -> None:
    made.clear()
