"""Review R91b: a ``call_id`` or ``run_id`` of a ``str`` subclass whose ``__bool__``, ``__hash__``
or ``__eq__`` raises was read (for the ids a twin is joined by) after ``Gate.run``/``arun`` had
used the allow and before the call was settled: its error came out with no outcome written, and
one from ``__hash__`` left the call counted in flight, so that ``Gate.close`` never returned. The
ids are now read as plain text: the call runs and is settled as one with plain ids.

Real components: a Gate on a SQLite file (``test_gate``'s policy: ``lookup`` is idempotent)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from test_gate import Setup

from agentgate.capabilities import Call
from agentgate.gate._outcomes import RESULT_REUSED

LOOKUP = Call.tool("lookup", {"id": "42"})


class RaisingBool(str):
    def __bool__(self) -> bool:
        raise RuntimeError("hostile __bool__")


class RaisingHash(str):
    def __hash__(self) -> int:
        raise RuntimeError("hostile __hash__")

    __eq__ = str.__eq__


class RaisingEq(str):
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("hostile __eq__")

    __hash__ = str.__hash__


HOSTILE = [RaisingBool, RaisingHash, RaisingEq]


def _closes(setup: Setup) -> bool:
    """Whether ``close`` returns (it waits for every call counted in flight)."""
    closing = threading.Thread(target=setup.gate.close, daemon=True)
    closing.start()
    closing.join(5)
    return not closing.is_alive()


def _outcomes(setup: Setup) -> list[tuple[str, tuple[str, ...]]]:
    return [(e.status, e.reasons) for e in setup.entries() if e.kind == "outcome"]


@pytest.mark.parametrize("hostile", HOSTILE)
def test_a_run_with_hostile_ids_is_settled_as_one_with_plain_ids(tmp_path: Path, hostile: type[str]) -> None:
    setup = Setup(tmp_path)
    ids = {"call_id": hostile("c1"), "run_id": hostile("r1")}
    first = setup.gate.authorize(setup.agent, LOOKUP)
    second = setup.gate.authorize(setup.agent, LOOKUP)
    ran: list[str] = []
    assert setup.gate.run(first, lambda: ran.append("ran") or "found", **ids) == "found"
    # The same ids key the same call: its result is reused, the tool not run again.
    assert setup.gate.run(second, lambda: "again", call_id="c1", run_id="r1") == "found"
    assert ran == ["ran"]
    assert _outcomes(setup) == [("ok", ()), ("ok", (RESULT_REUSED,))]
    assert _closes(setup)


@pytest.mark.parametrize("hostile", HOSTILE)
def test_an_arun_with_hostile_ids_is_settled_as_one_with_plain_ids(
    tmp_path: Path, hostile: type[str]
) -> None:
    setup = Setup(tmp_path)
    auth = setup.gate.authorize(setup.agent, LOOKUP)

    async def found() -> str:
        return "found"

    async def run() -> str:
        return await setup.gate.arun(auth, found, call_id=hostile("c1"), run_id=hostile("r1"))

    assert asyncio.run(run()) == "found"
    assert _outcomes(setup) == [("ok", ())]
    assert _closes(setup)
