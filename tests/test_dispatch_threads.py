"""One Gate and its dispatcher used by many OS threads through the sync API,
as a thread-pool web server or a LangGraph ``invoke`` with parallel tool calls uses them.

What was found: a model call made with ``Gate.dispatch`` in one thread while another thread
closes the gate never returned when it was waiting for a backend (its recovery, or a slot):
``Dispatcher.aclose`` returned with the call still paused, and ``Gate.close`` then stopped the
dispatcher's event loop under it.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
import time
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentgate.dispatch import Dispatcher, Router, inventory_from_mapping
from agentgate.dispatch.backends import ChatResult
from agentgate.dispatch.inventory import Inventory
from agentgate.errors import DispatchError, NoBackend
from agentgate.gate import Gate
from agentgate.policy import parse_policy
from agentgate.sim import SimServer
from agentgate.store import SQLiteStore

MODEL = "llama-3.1-8b"
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
ENDS_S = 10.0
"""How long a call may take to end once the gate closed (it ends at once; this only bounds a hang)."""


def _unreachable_inventory() -> Inventory:
    """One backend at a port nothing listens on: every call to it fails and it is marked down."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return inventory_from_mapping(
        {"backends": [{"name": "b0", "url": f"http://127.0.0.1:{port}", "models": [MODEL]}]}
    )


def _wait_until(condition: Any) -> None:
    deadline = time.monotonic() + ENDS_S
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.01)


class _Caller:
    """``gate.dispatch`` in a daemon thread of its own (a hung call must not hang the test run)."""

    def __init__(self, gate: Gate) -> None:
        self.outcome: list[BaseException | ChatResult] = []
        self.thread = threading.Thread(target=self._call, args=(gate,), daemon=True)
        self.thread.start()

    def _call(self, gate: Gate) -> None:
        try:
            self.outcome.append(gate.dispatch(BODY))
        except BaseException as exc:
            self.outcome.append(exc)

    def ended(self) -> BaseException | ChatResult:
        self.thread.join(ENDS_S)
        assert not self.thread.is_alive(), "gate.dispatch never returned after the gate closed"
        return self.outcome[0]


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[Gate]:
    made = Gate(parse_policy("version: 1\n", source="empty.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    yield made
    made.close()


def test_a_dispatch_waiting_for_a_backends_recovery_ends_with_no_backend_when_another_thread_closes(
    gate: Gate,
) -> None:
    inventory = _unreachable_inventory()
    dispatcher = Dispatcher(inventory, Router(inventory), recovery_wait_s=60.0)
    gate.attach_dispatcher(dispatcher)
    callers = [_Caller(gate) for _ in range(4)]
    _wait_until(lambda: dispatcher.is_down("b0"))  # the calls failed once and wait for it to come back
    gate.close()
    # NoBackend for a call that was waiting; a caller slower to start is refused (DispatchError).
    for caller in callers:
        ended = caller.ended()
        assert isinstance(ended, DispatchError), ended


def test_dispatches_queued_for_a_backends_only_slot_end_when_another_thread_closes(gate: Gate) -> None:
    with SimServer(time_scale=1.0) as server:
        inventory = inventory_from_mapping(
            {"backends": [{"name": "b0", "url": server.url, "models": [MODEL], "max_concurrency": 1}]}
        )
        router = Router(inventory)
        gate.attach_dispatcher(Dispatcher(inventory, router))
        long = {**BODY, "max_tokens": 5000}

        def call() -> None:
            try:
                gate.dispatch(long)
            except BaseException as exc:
                outcome.append(exc)

        outcome: list[BaseException] = []
        threads = [threading.Thread(target=call, daemon=True) for _ in range(6)]
        for thread in threads:
            thread.start()
        _wait_until(lambda: router.in_flight("b0") == 1)
        time.sleep(0.3)  # the others have asked and wait for its one slot
        gate.close()
        for thread in threads:
            thread.join(ENDS_S)
        assert not any(thread.is_alive() for thread in threads), "a queued dispatch never returned"
        assert len(outcome) == 6 and all(isinstance(exc, DispatchError) for exc in outcome), outcome
        assert any(isinstance(exc, NoBackend) for exc in outcome), outcome


async def test_aclose_returns_only_once_a_call_waiting_for_a_backend_has_ended() -> None:
    """``Gate.close`` stops the dispatcher's loop right after ``aclose``: a call still waiting
    then would never end. So ``aclose`` ends it (``NoBackend``) before it returns."""
    inventory = _unreachable_inventory()
    dispatcher = Dispatcher(inventory, Router(inventory), recovery_wait_s=60.0, health_interval_s=30.0)
    await dispatcher.start()
    call = asyncio.create_task(dispatcher.chat(BODY))
    while not dispatcher.is_down("b0"):
        await asyncio.sleep(0.01)
    await dispatcher.aclose()
    assert call.done()
    with pytest.raises(NoBackend, match="closed"):
        call.result()


async def test_a_stream_whose_consumer_holds_a_chunk_does_not_hold_aclose() -> None:
    with SimServer(time_scale=0.05) as server:
        inventory = inventory_from_mapping(
            {"backends": [{"name": "b0", "url": server.url, "models": [MODEL]}]}
        )
        dispatcher = Dispatcher(inventory, Router(inventory))
        await dispatcher.start()
        stream = dispatcher.stream({**BODY, "max_tokens": 5000})
        first = await anext(stream)
        assert first.content
        await asyncio.wait_for(dispatcher.aclose(), ENDS_S)
        await stream.aclose()


@pytest.mark.filterwarnings(
    "ignore:coroutine .* was never awaited:RuntimeWarning",
    "ignore::pytest.PytestUnraisableExceptionWarning",
)
def test_a_dispatch_that_raced_close_for_the_loop_is_refused_typed(gate: Gate) -> None:
    entered, proceed = threading.Event(), threading.Event()

    class _Racing(Dispatcher):
        """Holds the calling thread where ``Gate.dispatch`` has the loop but not yet handed it the call."""

        def chat(  # type: ignore[override]
            self, payload: Any, **route: Any
        ) -> Coroutine[Any, Any, ChatResult]:
            entered.set()
            proceed.wait(ENDS_S)
            return super().chat(payload, **route)

    inventory = _unreachable_inventory()
    gate.attach_dispatcher(_Racing(inventory, Router(inventory)))
    caller = _Caller(gate)
    assert entered.wait(ENDS_S)
    gate.close()
    proceed.set()
    ended = type(caller.ended())
    caller.outcome.clear()  # its traceback holds the coroutine the defect leaves unawaited:
    gc.collect()  # it warns here, under this test's filters
    assert issubclass(ended, DispatchError), ended
