"""Review R87: ``Gate.attach_dispatcher`` replaced an attached dispatcher without stopping it (its
loop thread ran past ``close``), took one after ``close`` (its thread never stopped), and raised a
bare ``AttributeError`` for ``"nope"``. A second attach and an attach after ``close`` are now
refused with ``DispatchError``, nothing started; a value that is no dispatcher with
``InputError``; a dispatcher whose ``start`` fails leaves no thread behind.

Real components: a Gate on a SQLite file (``test_gate``'s policy) and a real ``Dispatcher`` on
an inventory whose one backend nobody serves; stand-ins only where a ``start`` must fail.

The R87b and R87c attach tests import ``setup``, ``_dispatch_threads`` and ``_StandIn`` from here."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from test_gate import Setup

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.dispatcher import Dispatcher
from agentgate.dispatch.router import Router
from agentgate.errors import DispatchError, InputError

INVENTORY = inventory_from_mapping(
    {
        "backends": [
            {
                "name": "b0",
                "url": "http://127.0.0.1:9",
                "engine": "vllm",
                "models": ["m"],
                "max_concurrency": 1,
            }
        ]
    }
)


def _dispatcher() -> Dispatcher:
    return Dispatcher(INVENTORY, Router(INVENTORY))


def _dispatch_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "agentgate-dispatch"}


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    before = _dispatch_threads()
    made = Setup(tmp_path)
    yield made
    made.gate.close()
    assert _dispatch_threads() <= before  # every loop thread the gate started has stopped


def test_a_second_dispatcher_is_refused_and_the_first_keeps_serving(setup: Setup) -> None:
    first = _dispatcher()
    setup.gate.attach_dispatcher(first)
    started = _dispatch_threads()
    with pytest.raises(DispatchError, match="a dispatcher is attached to this gate already"):
        setup.gate.attach_dispatcher(_dispatcher())
    assert _dispatch_threads() == started  # nothing started for the second
    assert setup.gate._dispatch is not None and setup.gate._dispatch[0] is first


@pytest.mark.parametrize("attached", [False, True])
def test_a_dispatcher_is_refused_once_the_gate_is_closed(setup: Setup, attached: bool) -> None:
    if attached:
        setup.gate.attach_dispatcher(_dispatcher())
    setup.gate.close()
    before = _dispatch_threads()
    with pytest.raises(DispatchError, match="the gate is closed: it takes no dispatcher"):
        setup.gate.attach_dispatcher(_dispatcher())
    assert not setup.gate.dispatches and _dispatch_threads() == before


@pytest.mark.parametrize(
    ("given", "said"),
    [("nope", "a str"), (None, "None"), (object(), "a object")],
    ids=["text", "none", "object"],
)
def test_a_value_that_is_no_dispatcher_is_refused_by_its_type(setup: Setup, given: object, said: str) -> None:
    with pytest.raises(InputError, match=re.escape(f"dispatcher must be a dispatch.Dispatcher, got {said}")):
        setup.gate.attach_dispatcher(cast(Dispatcher, given))
    assert not setup.gate.dispatches


class _StandIn:
    """A stand-in dispatcher: what ``attach_dispatcher`` reads of a ``Dispatcher`` (its
    ``model_slo_ttft_s``), an async ``start`` that does nothing and an async ``aclose`` that
    counts its calls (``closed``). A test whose ``start`` or ``aclose`` waits, signals or fails
    overrides it."""

    def __init__(self) -> None:
        self.model_slo_ttft_s: dict[str, float] = {}
        self.closed = 0

    async def start(self) -> None:
        pass

    async def aclose(self) -> None:
        self.closed += 1


class _FailingStart(_StandIn):
    """A dispatcher whose ``start`` fails (a backend's key file that cannot be read, say)."""

    async def start(self) -> None:
        raise OSError("no connection pool today")


def test_a_dispatcher_whose_start_fails_leaves_no_thread_and_nothing_attached(setup: Setup) -> None:
    before = _dispatch_threads()
    with pytest.raises(OSError, match="no connection pool today"):
        setup.gate.attach_dispatcher(cast(Dispatcher, _FailingStart()))
    assert not setup.gate.dispatches and _dispatch_threads() == before
    setup.gate.attach_dispatcher(_dispatcher())  # the gate takes one that starts
    assert setup.gate.dispatches
