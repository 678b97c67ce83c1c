"""Review R87c: R87b made ``Gate.run`` refuse an ``fn`` returning an async generator as a call
that never started, but ``Gate.arun`` awaited only what ``inspect.isawaitable`` says, which an
async generator is not: it was returned as the call's result, a model call recorded ``ok`` and
charged, a once-only tool recorded as run (refused ever after) though none of its body ran. Now
``arun`` refuses it as ``run`` does: ``InputError``, an ``error`` outcome, the reservation
released, a once-only call left to run.

Real components: a Gate on a SQLite file (``test_gate``'s policy; ``refund`` runs once, ``small``
costs 1 micro-dollar a prompt token and 2 an output token)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from test_gate import Setup
from test_gate import setup as setup  # the fixture

from agentgate.capabilities import Call
from agentgate.errors import InputError

ran: list[str] = []


async def _answers() -> AsyncIterator[str]:
    ran.append("body")
    yield "answer"


FNS: list[Callable[[], Any]] = [_answers, lambda: _answers()]
FN_IDS = ["async-generator-function", "lambda-returning-one"]


@pytest.mark.parametrize("fn", FNS, ids=FN_IDS)
def test_a_model_call_whose_fn_returns_an_async_generator_is_settled_as_never_started(
    setup: Setup, fn: Callable[[], Any]
) -> None:
    auth = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(10, 10))
    with pytest.raises(InputError, match=r"model:small: Gate\.arun called an async generator function"):
        asyncio.run(setup.gate.arun(auth, fn, spent=lambda _: (10, 10)))
    outcome = setup.entries()[-1]
    assert outcome.status == "error" and outcome.budget_delta == 0  # until R87c: ok, charged 30
    assert outcome.reasons[0].startswith("InputError: given up before the call started")
    assert ran == []


@pytest.mark.parametrize("fn", FNS, ids=FN_IDS)
def test_a_once_only_tool_call_whose_fn_returns_an_async_generator_is_left_to_run(
    setup: Setup, fn: Callable[[], Any]
) -> None:
    def refund() -> Any:
        return setup.gate.authorize(setup.agent, Call.tool("refund", {"amount": 50}), call_id="c1")

    async def refunded() -> str:
        return "refunded"

    with pytest.raises(
        InputError, match="a Scheduler called an async generator function, whose body never ran"
    ):
        asyncio.run(setup.gate.arun(refund(), fn, call_id="c1"))
    outcome = setup.entries()[-1]
    assert outcome.status == "error" and outcome.reasons[0].startswith(
        "InputError: given up before the call started"
    )
    again = refund()
    assert again.allowed, again.reasons  # until R87c: "runs once, so it is not run again"
    assert asyncio.run(setup.gate.arun(again, refunded, call_id="c1")) == "refunded"
    assert ran == []


@pytest.fixture(autouse=True)
def _forget_runs() -> None:
    ran.clear()
