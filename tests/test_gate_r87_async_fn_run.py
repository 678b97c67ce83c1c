"""Review R87: ``Gate.run`` given an async function ran none of its body. A model call returned
the un-awaited coroutine as its result, recorded an ``ok`` outcome and charged the budget; a tool
call was refused by the scheduler (``InputError``) but recorded as one that started, so a
once-only call was refused ever after as one that "already ran and failed". Both are now a call
that never started: an ``error`` outcome, ``InputError`` raised, the reservation released, a
once-only call left to run. ``run`` and ``arun`` refuse an async ``failed``, ``spent`` or ``paused`` (read at once,
never awaited: ``spent``'s coroutine was charged as reserved, ``failed``'s read as a failure),
and a ``failed`` or ``spent`` that returns a coroutine is one that raised.

Real components: a Gate on a SQLite file (``test_gate``'s policy; ``refund`` is not idempotent,
so it runs once; ``small`` costs 1 micro-dollar a prompt token and 2 an output token)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Coroutine
from typing import Any

import pytest
from test_gate import Setup
from test_gate import setup as setup  # the fixture

from agentgate.capabilities import Call
from agentgate.errors import InputError
from agentgate.gate import Authorization

REFUND = Call.tool("refund", {"amount": 50})
ran: list[str] = []


async def answer() -> str:
    ran.append("answer")
    return "answer"


def _model(setup: Setup) -> Authorization:
    return setup.gate.authorize(setup.agent, Call.model("small"), tokens=(10, 10))


def _refund(setup: Setup) -> Authorization:
    return setup.gate.authorize(setup.agent, REFUND, call_id="c1")


def _used(setup: Setup) -> int:
    setup.gate.flush()
    return setup.gate.audit.size()


def _coroutine() -> Coroutine[Any, Any, str]:
    return answer()


ASYNC = [answer, functools.partial(answer), _coroutine]
ASYNC_IDS = ["async-def", "partial", "returns-a-coroutine"]


@pytest.mark.parametrize("fn", ASYNC, ids=ASYNC_IDS)
def test_a_model_call_of_an_async_function_is_settled_as_never_started(setup: Setup, fn: Any) -> None:
    with pytest.raises(
        InputError, match=r"model:small: Gate\.run called an async function, whose body never ran"
    ):
        setup.gate.run(_model(setup), fn, spent=lambda _: (10, 10))
    outcome = setup.entries()[-1]
    assert not ran and outcome.kind == "outcome" and outcome.status == "error"
    assert outcome.reasons[0].startswith("InputError: given up before the call started")
    assert outcome.budget_delta == 0


@pytest.mark.parametrize("fn", ASYNC, ids=ASYNC_IDS)
def test_a_once_only_tool_call_of_an_async_function_is_left_to_run(setup: Setup, fn: Any) -> None:
    with pytest.raises(InputError, match="a SyncScheduler called an async function, whose body never ran"):
        setup.gate.run(_refund(setup), fn, call_id="c1")
    outcome = setup.entries()[-1]
    assert not ran and outcome.status == "error" and outcome.budget_delta == 0
    assert outcome.reasons[0].startswith("InputError: given up before the call started")
    again = _refund(setup)
    assert again.allowed, again.reasons
    assert setup.gate.run(again, lambda: "refunded", call_id="c1") == "refunded"
    assert setup.entries()[-1].status == "ok"


async def _usage(_: object) -> tuple[int, int]:
    return (1, 1)


async def _failed(_: object) -> bool:
    return False


async def _paused(_: BaseException) -> bool:
    return False


@pytest.mark.parametrize("arun", [False, True])
@pytest.mark.parametrize("name", ["spent", "failed", "paused"])
def test_an_async_callback_is_refused_before_the_allow_is_used(setup: Setup, arun: bool, name: str) -> None:
    callback = {"spent": _usage, "failed": _failed, "paused": _paused}[name]
    auth = _model(setup)
    before = _used(setup)
    with pytest.raises(InputError, match=f"{name} must be a plain function of .*, got an async function"):
        if arun:
            asyncio.run(setup.gate.arun(auth, answer, **{name: callback}))
        else:
            setup.gate.run(auth, lambda: "x", **{name: callback})
    assert _used(setup) == before and not ran
    assert setup.gate.run(auth, lambda: "done") == "done"  # the allow is still unused


@pytest.mark.parametrize("name", ["spent", "failed"])
def test_a_callback_that_returns_a_coroutine_is_one_that_raised(setup: Setup, name: str) -> None:
    callback = {"spent": lambda r: _usage(r), "failed": lambda r: _failed(r)}[name]
    with pytest.raises(InputError, match=f"{name} returned a coroutine, which is never awaited"):
        asyncio.run(setup.gate.arun(_model(setup), answer, **{name: callback}))
    outcome = setup.entries()[-1]
    assert outcome.status == "error" and outcome.reasons[0] == "InputError"
    assert "charged as reserved" in outcome.reasons[-1] and outcome.budget_delta == 30


@pytest.fixture(autouse=True)
def _forget_runs() -> None:
    ran.clear()
