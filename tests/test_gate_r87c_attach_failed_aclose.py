"""Review R87c: when a dispatcher's ``start`` fails, ``Gate.attach_dispatcher`` gives it its
``aclose`` and drops what that raises, so that the start's error is raised. R87b dropped only
what the awaited ``aclose`` raised: one that raised when called, or returned no coroutine (a
``TypeError`` from the loop), replaced the start's error. Both are dropped now too.

Real components: a Gate on a SQLite file (``test_gate``'s policy); stand-in dispatchers."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from test_gate import Setup

from agentgate.dispatch.dispatcher import Dispatcher


def _dispatch_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "agentgate-dispatch"}


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    before = _dispatch_threads()
    made = Setup(tmp_path)
    yield made
    made.gate.close()
    assert _dispatch_threads() <= before  # every loop thread the gate started has stopped


class _PlainAclose:
    def __init__(self) -> None:
        self.model_slo_ttft_s: dict[str, float] = {}
        self.closed = 0

    async def start(self) -> None:
        raise OSError("no connection pool")

    def aclose(self) -> None:
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
