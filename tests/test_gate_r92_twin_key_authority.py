"""Review R92: a failure of a tool call with a ``call_id`` is kept past its end for the calls then
in flight that may have joined it (review R91b). The Gate grouped those calls by resource, run,
call id and arguments digest (review R91c) but not by the tenant, principal and grant that the
scheduler's idempotency key also holds: while one call waited on a long-running twin, every
failed call with those ids under another grant (a re-issue, another agent, another tenant),
which the scheduler keys apart and so can never join, was kept, its exception and traceback,
until that joiner ended. The Gate now groups the calls by the scheduler's own idempotency key.

Real components: a Gate on a SQLite file (``test_gate``'s policy: ``lookup`` is idempotent)."""

from __future__ import annotations

import gc
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_gate import Setup

from agentgate.capabilities import Call

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


def test_a_joiner_keeps_no_failure_of_calls_under_another_grant(setup: Setup) -> None:
    gate, entered, release = setup.gate, threading.Event(), threading.Event()
    # A second grant to the same agent: the scheduler keys its calls apart (the grant).
    other_grant = gate.issue(setup.keys["root"], name="agent", key=setup.keys["agent"], role="worker")
    assert other_grant.grant_id != setup.agent.grant_id

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
        deadline = time.monotonic() + 5
        while not gate._sync().scheduler.metrics.count("reused", "lookup"):  # the joiner joined
            assert time.monotonic() < deadline
            time.sleep(0.002)
        failures = []
        for _ in range(5):
            other = gate.authorize(other_grant, lookup, **IDS)  # same ids, same arguments
            with pytest.raises(Boom) as failed:
                gate.run(other, _fail, **IDS)
            failures.append(weakref.ref(failed.value))
            del failed
        gc.collect()
        assert [ref() for ref in failures] == [None] * 5
    finally:
        release.set()
        for thread in threads:
            thread.join(5)
    assert not gate._same_ids
