"""Review R91c: a failure of a tool call with a ``call_id`` is kept past its end for the calls then
in flight with its ids that may have joined it (review R91b). The ids had no arguments digest, so
while one call waited on a long-running twin, every failed call with the same resource, run and
call id but other arguments (which the scheduler keys apart: no call could have joined it) was
kept, its exception and traceback, until that joiner ended. The ids now carry the decision's
arguments digest, as the scheduler's idempotency key does.

Real components: a Gate on a SQLite file (``test_gate``'s policy: ``lookup`` is idempotent)."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from test_gate import Setup
from test_gate_r91_twin_failure import _until_joined

from agentgate.capabilities import Call
from agentgate.gate import Authorization

IDS = {"call_id": "c1", "run_id": "r1"}


class Boom(Exception):
    """A tool's failure (a class of its own: built-in exceptions cannot be weakly referenced)."""


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    made = Setup(tmp_path, budget=10**12)
    yield made
    made.gate.close()


def _fail() -> str:
    raise Boom("down")


def assert_joiner_keeps_no_failure(setup: Setup, other: Callable[[int], Authorization]) -> None:
    """While a joiner waits on a long-running twin, five failed calls ``other(i)`` (authorized
    with ``IDS``, keyed apart from the twin by the scheduler) are not kept: none outlives its end.
    Shared with ``test_gate_r92_twin_key_authority``."""
    gate, entered, release = setup.gate, threading.Event(), threading.Event()

    def long_tool() -> str:
        entered.set()
        assert release.wait(5)
        return "done"

    lookup = Call.tool("lookup", {"id": "1"})
    long_call, joiner = (gate.authorize(setup.agent, lookup, **IDS) for _ in range(2))
    threads = [
        threading.Thread(target=gate.run, args=(long_call, long_tool), kwargs=IDS),
        threading.Thread(target=gate.run, args=(joiner, lambda: "never"), kwargs=IDS),
    ]
    threads[0].start()
    try:
        assert entered.wait(5)
        threads[1].start()
        _until_joined(gate._sync())
        failures = []
        for i in range(5):
            with pytest.raises(Boom) as failed:
                gate.run(other(i), _fail, **IDS)
            failures.append(weakref.ref(failed.value))
            del failed
        gc.collect()
        assert [ref() for ref in failures] == [None] * 5
    finally:
        release.set()
        for thread in threads:
            thread.join(5)
    assert not gate._same_ids


def test_a_joiner_keeps_no_failure_of_calls_with_other_arguments(setup: Setup) -> None:
    assert_joiner_keeps_no_failure(
        setup,
        lambda i: setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": f"other{i}"}), **IDS),
    )
