"""Review R87b: ``Gate.arun``'s ``began`` was the one callback R87 did not check. An async
``began`` was taken; on a cancellation its coroutine was read for its truth (work that began),
never awaited, so ``began`` neither answered nor kept the handed-off work from beginning. And
what a ``began`` raised replaced the cancellation, the call's outcome never written. Now an
async ``began`` is refused with ``InputError`` before the allow is used, as an async ``paused``
is; a ``began`` that returns a coroutine anyway (an async function behind a ``lambda``) or raises
says nothing, its coroutine closed, and the call is recorded as it is without a ``began``:
started once an attempt entered ``fn`` (read as "not begun", a once-only call could run again on
resume while the work it handed off still begins). The cancellation goes on.

Real components: a Gate on a SQLite file (``test_gate``'s policy; ``refund`` runs once)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from test_gate import Setup
from test_gate import setup as setup  # the fixture

from agentgate.capabilities import Call
from agentgate.errors import InputError
from agentgate.gate import Authorization

made: list[Coroutine[Any, Any, bool]] = []


async def _never_began() -> bool:
    return False


def _returns_a_coroutine() -> Any:
    coroutine = _never_began()
    made.append(coroutine)
    return coroutine


def _raises() -> bool:
    raise RuntimeError("the queue is gone")


def _refund(setup: Setup) -> Authorization:
    return setup.gate.authorize(setup.agent, Call.tool("refund", {"amount": 50}), call_id="c1")


async def _cancelled_while_handed_off(setup: Setup, auth: Authorization, began: Callable[[], Any]) -> None:
    """``arun`` of work handed off to a place where it waits, cancelled once its attempt began."""
    entered = asyncio.Event()

    async def handed_off() -> str:
        entered.set()
        await asyncio.Event().wait()
        return "refunded"

    task = asyncio.create_task(setup.gate.arun(auth, handed_off, call_id="c1", began=began, preemptible=True))
    await entered.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def test_an_async_began_is_refused_before_the_allow_is_used(setup: Setup) -> None:
    auth = _refund(setup)

    async def refund() -> str:
        return "refunded"

    with pytest.raises(
        InputError, match="began must be a plain function of no arguments, got an async function"
    ):
        asyncio.run(setup.gate.arun(auth, refund, call_id="c1", began=_never_began))
    assert setup.entries()[-1].kind == "allow"  # no outcome: the allow is still unused
    assert asyncio.run(setup.gate.arun(auth, refund, call_id="c1", began=lambda: True)) == "refunded"
    assert setup.entries()[-1].status == "ok"


def test_a_began_that_is_no_function_is_refused(setup: Setup) -> None:
    with pytest.raises(InputError, match="began must be a function of no arguments or None, got True"):
        asyncio.run(setup.gate.arun(_refund(setup), _never_began, call_id="c1", began=True))  # type: ignore[arg-type]


@pytest.mark.parametrize("began", [_returns_a_coroutine, _raises], ids=["returns-a-coroutine", "raises"])
def test_a_began_that_says_nothing_leaves_the_call_started_as_without_one(
    setup: Setup, began: Callable[[], Any]
) -> None:
    asyncio.run(_cancelled_while_handed_off(setup, _refund(setup), began))  # the cancellation goes on
    outcome = setup.entries()[-1]
    assert outcome.kind == "outcome" and outcome.status == "error"
    assert outcome.reasons[0] == "CancelledError"  # started: it may have had its effect
    assert all(inspect.getcoroutinestate(c) == inspect.CORO_CLOSED for c in made)
    again = _refund(setup)
    assert not again.allowed and "runs once, so it is not run again" in again.reasons[0]


@pytest.fixture(autouse=True)
def _forget_coroutines() -> None:
    made.clear()
