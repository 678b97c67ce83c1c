"""Review R90c: the async ``Scheduler`` with a store gave a half-open probe's cross-process claim
back on the store pool without awaiting it (``_end_probe``), as ``SyncScheduler`` did until R90b.
A probe whose call ended without telling the breaker (an interrupt in its classifier or its
``pauses`` predicate, a pause) had its error reach its caller while that give-back was still on
its way: a call made right after found the claim still held and was refused with
``CircuitOpen`` ("its 1 probe(s) run"), though no probe ran. The caller is now told once the
give-back has landed (not when the call is cancelled: it does not wait then).

The store's give-back here waits for the next call to try its claim (at most ``HOLD_S``): the
order a loaded machine may take is then the order taken every time.

Real components: a ``Scheduler`` with a SQLite store; ``LeaseManager`` patched only to hold a
probe's give-back and note the tries for a probe's claim."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_tasks_r90b_probe_given_back_first import (
    CONFIG,
    HOW,
    RESET_S,
    _ended,
    _held_give_back,
    _ProbeDown,
)

from agentgate.store import open_store
from agentgate.tasks import Attempt, BreakerState, Scheduler, ToolCall


async def _down(attempt: Attempt) -> str:
    raise ConnectionRefusedError("down")


async def _probe_down(attempt: Attempt) -> str:
    raise _ProbeDown("still down")


async def _ran(attempt: Attempt) -> str:
    return "ran"


async def _told(scheduler: Scheduler, call: ToolCall, fn: Callable[[Attempt], Any]) -> str:
    """What ``submit`` gave its caller: its result, or the name of what it raised."""
    try:
        return str(await scheduler.submit(call, fn))
    except BaseException as exc:
        return type(exc).__name__


@HOW
def test_a_probe_s_claim_is_back_before_its_caller_is_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str, told: str
) -> None:
    given_back_after_it = _held_give_back(monkeypatch)
    classifier, pauses = _ended(how)

    async def main() -> None:
        scheduler = Scheduler(CONFIG, store=open_store(str(tmp_path / "s.db")), classifier=classifier)
        try:
            assert await _told(scheduler, ToolCall("t", {}), _down) == "ConnectionRefusedError"
            await asyncio.sleep(RESET_S * 2)  # half open: the next call is its probe
            assert await _told(scheduler, ToolCall("t", {}, pauses=pauses), _probe_down) == told
            assert await _told(scheduler, ToolCall("t", {}), _ran) == "ran"  # was CircuitOpen
            assert given_back_after_it[0] is False  # back before the next call asked for its own
            assert scheduler.breakers()[0].state is BreakerState.CLOSED
        finally:
            await scheduler.aclose(timeout_s=5)

    asyncio.run(main())
