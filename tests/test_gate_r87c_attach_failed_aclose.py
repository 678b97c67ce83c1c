"""Review R87c: when a dispatcher's ``start`` fails, ``Gate.attach_dispatcher`` gives it its
``aclose`` and drops what that raises, so that the start's error is raised. R87b dropped only
what the awaited ``aclose`` raised: one that raised when called, or returned no coroutine (a
``TypeError`` from the loop), replaced the start's error. Both are dropped now too.

Real components: a Gate on a SQLite file (``test_gate``'s policy); stand-in dispatchers."""

from __future__ import annotations

from typing import Any, cast

import pytest
from test_gate import Setup
from test_gate_r87_attach_dispatcher import _dispatch_threads, _StandIn
from test_gate_r87_attach_dispatcher import setup as setup  # the fixture

from agentgate.dispatch.dispatcher import Dispatcher


class _PlainAclose(_StandIn):
    async def start(self) -> None:
        raise OSError("no connection pool")

    def aclose(self) -> None:  # type: ignore[override]
        self.closed += 1


class _RaisingAclose(_PlainAclose):
    def aclose(self) -> None:
        self.closed += 1
        raise ValueError("nothing to close")


@pytest.mark.parametrize(
    "standin", [_PlainAclose, _RaisingAclose], ids=["returns-no-coroutine", "raises-when-called"]
)
def test_a_failed_starts_error_is_raised_whatever_a_plain_aclose_does(
    setup: Setup, standin: type[Any]
) -> None:
    before = _dispatch_threads()
    dispatcher = standin()
    with pytest.raises(OSError, match="no connection pool"):  # until R87c: aclose's error
        setup.gate.attach_dispatcher(cast(Dispatcher, dispatcher))
    assert dispatcher.closed == 1
    assert _dispatch_threads() <= before and not setup.gate.dispatches
