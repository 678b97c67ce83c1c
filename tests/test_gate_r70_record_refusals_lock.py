"""``Gate.record_refusals`` (review R69: a model answer's invalid tool calls recorded in one
decision transaction) ran without the gate's store lock, which every other entry point that
writes the store holds (``_serialized``): a decision transaction took the pending outcomes and
wrote while another thread's decision, or ``Gate.close``'s last commit of the outcomes, held
it. Real Gate, real SQLite file."""

from __future__ import annotations

import threading
from pathlib import Path

from test_gate_run import Setup

from agentgate.capabilities import Call


def test_record_refusals_waits_for_the_store_lock_another_decision_holds(tmp_path: Path) -> None:
    """Review R70: ``record_refusals`` wrote its entries (and took the outcomes pending) while
    another thread held the gate's store lock, as ``record_refusal`` never does; now it waits
    for the lock, then writes."""
    setup = Setup(tmp_path)
    try:
        done = threading.Event()
        failed: list[BaseException] = []

        def refuse() -> None:
            try:
                setup.gate.record_refusals(setup.agent, [(Call.tool("search"), ("not run",))])
            except BaseException as exc:  # reported below, not lost in the thread
                failed.append(exc)
            done.set()

        with setup.gate._store_lock:  # another decision (or close's last commit) in progress
            worker = threading.Thread(target=refuse)
            worker.start()
            written_while_held = done.wait(timeout=1.0)
        worker.join(timeout=30)
        assert not failed
        assert not written_while_held, "record_refusals wrote while another thread held the store lock"
        assert done.is_set()
        assert [e.kind for e in setup.entries()].count("deny") == 1
    finally:
        setup.gate.close()


def test_revoke_holder_revokes_under_the_store_lock_another_decision_holds(tmp_path: Path) -> None:
    """Review R70: ``Gate.revoke_holder`` (never ``_serialized``; since review R69 it reads the
    whole table first, outside any lock) wrote its revocations and entries while another
    thread's decision held the gate's store lock, as ``Gate.revoke`` never does; now its scan
    still runs outside the lock, and its revoking transaction waits for it."""
    setup = Setup(tmp_path)
    try:
        done = threading.Event()
        failed: list[BaseException] = []

        def revoke() -> None:
            try:
                setup.gate.revoke_holder(setup.keys["agent"].did, reason="key leaked")
            except BaseException as exc:  # reported below, not lost in the thread
                failed.append(exc)
            done.set()

        with setup.gate._store_lock:  # another decision in progress
            worker = threading.Thread(target=revoke)
            worker.start()
            written_while_held = done.wait(timeout=1.0)
        worker.join(timeout=30)
        assert not failed
        assert not written_while_held, "revoke_holder wrote while another thread held the store lock"
        assert done.is_set()
        assert [e.kind for e in setup.entries()].count("revoke") == 1
    finally:
        setup.gate.close()
