"""The outcome of a call served another call's result gives ``RESULT_REUSED`` last, on its own.

docs/audit-format.md says an outcome the scheduler served with the result of another call with
the same idempotency key has, after any other reason, the reason ``result reused: ...``. Review
R90 joined it to the failure's reason instead (``'RuntimeError; result reused: ...'``) and put the
reasons of the usage and the settlement after it: a reader that looks for the exception's type in
the first reason found the reuse text glued to it. It is now a reason of its own, the last one.

Real components: a Gate on a SQLite file (``test_gate``'s policy: ``lookup`` is idempotent)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_gate import Setup

from agentgate.capabilities import Call
from agentgate.gate._outcomes import RESULT_REUSED

LOOKUP = Call.tool("lookup", {"id": "42"})
IDS = {"call_id": "c1", "run_id": "r1"}


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    made = Setup(tmp_path)
    yield made
    made.gate.close()


def _served_again(setup: Setup, **settled: object) -> tuple[str, ...]:
    """The reasons of the outcome of a lookup served the result of the one before it, settled
    with ``settled`` (``spent``, ``failed``), whose exception is let through."""
    setup.gate.run(setup.gate.authorize(setup.agent, LOOKUP, **IDS), lambda: "found", **IDS)
    with pytest.raises(RuntimeError, match="unreadable"):
        setup.gate.run(setup.gate.authorize(setup.agent, LOOKUP, **IDS), lambda: "found", **IDS, **settled)
    first, served = (entry for entry in setup.entries() if entry.kind == "outcome")
    assert RESULT_REUSED not in first.reasons
    assert served.status == "error"
    return served.reasons


def _unreadable(_result: str) -> tuple[int, int]:
    raise RuntimeError("usage unreadable")


def _failed(_result: str) -> BaseException:
    return RuntimeError("answer unreadable")


def test_a_reused_result_whose_usage_cannot_be_read_gives_the_reuse_after_the_usage(setup: Setup) -> None:
    assert _served_again(setup, spent=_unreadable) == (
        "RuntimeError",
        "the call ran but its usage could not be read; charged as reserved",
        RESULT_REUSED,
    )


def test_a_reused_result_that_failed_keeps_its_failure_reason_apart(setup: Setup) -> None:
    reasons = _served_again(setup, failed=_failed)
    assert reasons[-1] == RESULT_REUSED
    assert reasons[0].startswith("RuntimeError") and "result reused" not in reasons[0]
