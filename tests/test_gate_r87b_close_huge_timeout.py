"""Review R87b: ``Gate.close`` passed a large finite ``timeout_s`` (``1e10``, ``1e300``, an integer
that a float still holds) as it was to ``Condition.wait_for``, which cannot wait past the
platform's time_t: with a call in flight it raised ``OverflowError`` at once, without waiting, and
that call's outcome was lost. The gate now waits in steps, as ``SyncScheduler.close`` does
(``wait_until``), and its log line for calls left running says how long it waited in a few
characters (it read "after at most no bound", or printed a number of 300 digits).

Real components: a Gate on a SQLite file (``test_gate``'s policy), its run in another thread."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest
from test_gate import Setup

from agentgate.capabilities import Call
from agentgate.errors import StoreError
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog


def _run_in_flight(setup: Setup, release: threading.Event) -> tuple[threading.Thread, list[object]]:
    """A model call running in another thread until ``release`` is set."""
    auth = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(10, 10))
    running = threading.Event()
    returned: list[object] = []

    def answer() -> str:
        running.set()
        release.wait(5)
        return "answer"

    thread = threading.Thread(target=lambda: returned.append(setup.gate.run(auth, answer)))
    thread.start()
    running.wait(5)
    return thread, returned


@pytest.mark.parametrize("timeout_s", [1e10, 10**19, 1e300], ids=["1e10", "10**19", "1e300"])
def test_a_huge_finite_timeout_waits_for_the_call_in_flight_and_records_its_outcome(
    tmp_path: Path, timeout_s: float
) -> None:
    setup = Setup(tmp_path)
    release = threading.Event()
    thread, returned = _run_in_flight(setup, release)

    def release_once_closing() -> None:  # the call is still running when close starts to wait
        while not setup.gate._closing:
            time.sleep(0.005)
        time.sleep(0.2)
        release.set()

    releaser = threading.Thread(target=release_once_closing)
    releaser.start()
    setup.gate.close(timeout_s=timeout_s)  # until R87b: OverflowError, the outcome lost
    releaser.join()
    thread.join()
    assert returned == ["answer"]
    outcome = list(AuditLog(SQLiteStore(tmp_path / "agentgate.db"), SigningKey.generate()).entries())[-1]
    assert outcome.kind == "outcome" and outcome.status == "ok"  # recorded before the store closed
    with pytest.raises(StoreError, match="closed"):
        setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": "2"}))


def test_the_log_line_for_a_call_left_running_says_how_long_close_waited(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    setup = Setup(tmp_path)
    release = threading.Event()
    thread, _ = _run_in_flight(setup, release)
    with caplog.at_level(logging.ERROR, logger="agentgate.gate"):
        setup.gate.close(timeout_s=0.05)
    release.set()
    thread.join()
    (line,) = [r.getMessage() for r in caplog.records if "had not settled" in r.getMessage()]
    assert "1 calls had not settled when close() stopped waiting (it waited 0.05s)" in line
