"""Review R87c: R87b's ``Gate.attach_dispatcher`` called the dispatcher's ``start`` outside the
``try`` that stops things on failure. A ``start`` that raised when called (a plain function), or
returned no coroutine, left the gate "being attached" for good (every later attach refused) and
its loop thread running (``close`` did not stop it). Now what ``start`` raises when called is
raised as a failed start's error is, and a ``start`` returning no coroutine raises
``InputError``; either way the loop thread stops and the gate takes a dispatcher after.

Real components: a Gate on a SQLite file (``test_gate``'s policy); stand-in dispatchers."""

from __future__ import annotations

from typing import Any, cast

import pytest
from test_gate import Setup
from test_gate_r87_attach_dispatcher import _dispatch_threads, _StandIn
from test_gate_r87_attach_dispatcher import setup as setup  # the fixture

from agentgate.dispatch.dispatcher import Dispatcher
from agentgate.errors import InputError


class _RaisingStart(_StandIn):
    def start(self) -> None:  # type: ignore[override]
        raise OSError("no pool")


class _PlainStart(_StandIn):
    def start(self) -> None:  # type: ignore[override]
        return None


@pytest.mark.parametrize(
    ("standin", "error", "match"),
    [
        (_RaisingStart, OSError, "no pool"),
        (_PlainStart, InputError, "the dispatcher's start must be a coroutine function, it returned None"),
    ],
    ids=["raises-when-called", "returns-no-coroutine"],
)
def test_a_start_that_fails_when_called_leaves_the_gate_free_and_no_loop_thread(
    setup: Setup, standin: type[Any], error: type[Exception], match: str
) -> None:
    before = _dispatch_threads()
    with pytest.raises(error, match=match):
        setup.gate.attach_dispatcher(cast(Dispatcher, standin()))
    assert _dispatch_threads() <= before and not setup.gate.dispatches
    setup.gate.attach_dispatcher(cast(Dispatcher, _StandIn()))  # until R87c: "being attached already"
    assert setup.gate.dispatches
