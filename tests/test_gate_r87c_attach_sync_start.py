"""Review R87c: R87b's ``Gate.attach_dispatcher`` called the dispatcher's ``start`` outside the
``try`` that stops things on failure. A ``start`` that raised when called (a plain function), or
returned no coroutine, left the gate "being attached" for good (every later attach refused) and
its loop thread running (``close`` did not stop it). Now what ``start`` raises when called is
raised as a failed start's error is, and a ``start`` returning no coroutine raises
``InputError``; either way the loop thread stops and the gate takes a dispatcher after.

Real components: a Gate on a SQLite file (``test_gate``'s policy); stand-in dispatchers."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from test_gate import Setup

from agentgate.dispatch.dispatcher import Dispatcher
from agentgate.errors import InputError


def _dispatch_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "agentgate-dispatch"}


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    before = _dispatch_threads()
    made = Setup(tmp_path)
    yield made
    made.gate.close()
    assert _dispatch_threads() <= before  # every loop thread the gate started has stopped


class _RaisingStart:
    def __init__(self) -> None:
        self.model_slo_ttft_s: dict[str, float] = {}

    def start(self) -> None:
        raise OSError("no pool")

    async def aclose(self) -> None:
        pass


class _PlainStart(_RaisingStart):
    def start(self) -> None:
        return None


class _Good(_RaisingStart):
    async def start(self) -> None:
        pass


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
    setup.gate.attach_dispatcher(cast(Dispatcher, _Good()))  # until R87c: "being attached already"
    assert setup.gate.dispatches
