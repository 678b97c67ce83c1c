"""Review R91c: the bookkeeping of the tool calls that share ids (``_SameIds``, review R91b),
done under the Gate's lock as each call ends, walked every call in flight with the ids on each
end, and a joiner looking for its twin's failure walked them all before the failures kept: N
joiners of one running twin took O(N²) steps to settle. Each call is now counted out in
constant time (amortized), so the steps taken grow linearly with N. Counted, not timed: the
lines run in ``_SameIds``'s code (its comprehensions and generators included).

Real components: a Gate on a SQLite file (``test_gate``'s policy: ``lookup`` is idempotent)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from test_gate import Setup
from test_gate_r91_twin_failure import _until_joined

from agentgate.capabilities import Call

IDS = {"call_id": "c1", "run_id": "r1"}


class Boom(Exception):
    """The twin's failure."""


def _steps(setup: Setup, joiners: int, fail: bool) -> int:
    """Lines run in ``_SameIds`` while ``joiners`` calls join one running twin and all settle."""
    gate, lookup = setup.gate, Call.tool("lookup", {"id": "1"})
    auths = [gate.authorize(setup.agent, lookup, **IDS) for _ in range(joiners + 1)]
    steps = 0

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal steps
        steps += event == "line"
        return local

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code.co_qualname.startswith("_SameIds.") else None

    async def main() -> list[object]:
        release, entered = asyncio.Event(), asyncio.Event()

        async def work() -> str:
            entered.set()
            await release.wait()
            if fail:
                raise Boom("down")
            return "ok"

        async def never() -> str:
            raise AssertionError("a joiner ran its own tool")

        twin = asyncio.create_task(gate.arun(auths[0], work, **IDS))
        await entered.wait()
        waiting = [asyncio.create_task(gate.arun(auth, never, **IDS)) for auth in auths[1:]]
        await asyncio.to_thread(_until_joined, await gate._async(), joiners)
        sys.settrace(tracer)
        try:
            release.set()
            return await asyncio.gather(twin, *waiting, return_exceptions=True)
        finally:
            sys.settrace(None)

    ended = asyncio.run(main())
    assert all(isinstance(e, Boom) if fail else e == "ok" for e in ended), {repr(e) for e in ended}
    assert not gate._same_ids
    return steps


@pytest.mark.parametrize("fail", [False, True], ids=["returned", "failed"])
def test_joiners_of_one_twin_settle_in_linear_steps(tmp_path: Path, fail: bool) -> None:
    counts = []
    for n in (40, 160):
        made = Setup(tmp_path / str(n), budget=10**12)
        try:
            counts.append(_steps(made, n, fail))
        finally:
            made.gate.close()
    few, many = counts
    # Four times the joiners: about four times the steps (sixteen, when each end walked them all).
    assert many <= 6 * few, counts
