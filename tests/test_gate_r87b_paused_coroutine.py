"""Review R87b: R87 refused an async ``paused`` given to ``Gate.run``/``arun``, and a ``failed`` or
``spent`` that returns a coroutine, but not a ``paused`` that returns one where its signature does
not say so (``lambda e: is_interrupt(e)`` over an async function, a ``functools.partial`` of an
object whose ``__call__`` is async). Its coroutine was read for its truth: every failure was
recorded ``paused``, a model call's reservation released as a pause releases it, and the
coroutine was never closed ("never awaited"). Such a ``paused`` now says no, as one that raises
does, for the Gate and for its scheduler (``ToolCall.pauses``) alike, and its coroutine is
closed.

Real components: a Gate on a SQLite file (``test_gate``'s policy)."""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from test_gate import Setup
from test_gate import setup as setup  # the fixture

from agentgate.capabilities import Call
from agentgate.gate import Authorization

made: list[Coroutine[Any, Any, bool]] = []


async def _is_interrupt(_: BaseException) -> bool:
    return False


class _AsyncPredicate:
    async def __call__(self, error: BaseException) -> bool:
        return False


def _kept(coroutine: Coroutine[Any, Any, bool]) -> Coroutine[Any, Any, bool]:
    made.append(coroutine)
    return coroutine


PAUSED: list[Callable[[BaseException], Any]] = [
    lambda e: _kept(_is_interrupt(e)),
    lambda e: _kept(functools.partial(_AsyncPredicate())(e)),
]
PAUSED_IDS = ["lambda", "partial-of-async-callable"]


def _fails() -> str:
    raise ValueError("the tool failed")


async def _afails() -> str:
    raise ValueError("the tool failed")


def _auth(setup: Setup, model: bool) -> Authorization:
    if model:
        return setup.gate.authorize(setup.agent, Call.model("small"), tokens=(10, 10))
    return setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": "1"}))


@pytest.mark.parametrize("arun", [False, True], ids=["run", "arun"])
@pytest.mark.parametrize("model", [False, True], ids=["tool", "model"])
@pytest.mark.parametrize("paused", PAUSED, ids=PAUSED_IDS)
def test_a_paused_that_returns_a_coroutine_says_the_failure_is_no_pause(
    setup: Setup, paused: Callable[[BaseException], Any], model: bool, arun: bool
) -> None:
    auth = _auth(setup, model)
    with pytest.raises(ValueError, match="the tool failed"):
        if arun:
            asyncio.run(setup.gate.arun(auth, _afails, paused=paused))
        else:
            setup.gate.run(auth, _fails, paused=paused)
    outcome = setup.entries()[-1]
    assert outcome.kind == "outcome" and outcome.status == "error", outcome.reasons
    assert outcome.reasons[0] == "ValueError"
    assert made and all(inspect.getcoroutinestate(c) == inspect.CORO_CLOSED for c in made)


@pytest.fixture(autouse=True)
def _forget_coroutines() -> None:
    made.clear()
