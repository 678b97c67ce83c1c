"""Authorization (agentgate/gate/_authorization.py): the sealed decision the Gate hands back. An
allow runs once, whoever holds it and from whatever thread or event loop, is refused when copied
or changed by hand, and its repr shows no argument value."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import pickle
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_gate_approvals import _agent, _gate
from test_gate_policy_change import LOOKUP

from agentgate.capabilities import Call
from agentgate.errors import Denied
from agentgate.gate import Authorization, Gate
from agentgate.store import SQLiteStore


def test_an_authorizations_repr_holds_no_argument_value_nor_reason() -> None:
    """Review R48 (leaks, noted): ``repr(Authorization)`` showed the call's arguments and the
    reasons, which may quote them, though the policy keeps some out of logs; an application
    logging it (``log.info("%r", auth)``) wrote them. It shows the verdict, the resource, the
    audit index, the rule and the findings' codes."""
    auth = Authorization(
        verdict="deny",
        call=Call.tool("payments.charge", {"card": "4111-1111-1111-1111"}),
        identity=None,
        reasons=("card '4111-1111-1111-1111' is not allowed",),
        audit_index=7,
    )
    shown = repr(auth)
    assert "4111" not in shown and "card" not in shown, shown
    assert "verdict='deny'" in shown and "tool:payments.charge" in shown and "audit_index=7" in shown


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[Gate]:
    made = _gate(SQLiteStore(tmp_path / "ag.db"))
    yield made
    made.close()


def test_an_allow_cannot_be_run_twice_through_a_copy_nor_copied_deeply(gate: Gate) -> None:
    agent = _agent(gate)
    auth = gate.authorize(agent, LOOKUP, call_id="c1")
    assert gate.run(copy.copy(auth), lambda: "copy") == "copy"
    with pytest.raises(Denied, match="already used"):
        gate.run(auth, lambda: "original")
    fresh = gate.authorize(agent, LOOKUP, call_id="c2")
    for duplicate in (copy.deepcopy, lambda a: pickle.loads(pickle.dumps(a))):
        with pytest.raises(TypeError):
            duplicate(fresh)
    assert gate.run(fresh, lambda: "ran") == "ran"  # the failed copies used nothing


def test_an_allow_changed_by_hand_is_refused(gate: Gate) -> None:
    agent = _agent(gate)
    ran: list[str] = []
    auth = gate.authorize(agent, Call.tool("refund", {"amount": 50}), call_id="c1")
    object.__setattr__(auth, "call", Call.tool("refund", {"amount": 1_000_000}))
    with pytest.raises(Denied, match="not decided by this Gate"):
        gate.run(auth, lambda: ran.append("setattr"))
    other = gate.authorize(agent, Call.tool("refund", {"amount": 60}), call_id="c2")
    with pytest.raises(Denied, match="not decided by this Gate"):
        gate.run(
            dataclasses.replace(other, call=Call.tool("refund", {"amount": 900})), lambda: ran.append("x")
        )
    refused = gate.authorize(agent, Call.tool("refund", {"amount": 5000}), call_id="c3")
    assert not refused.allowed
    donor = gate.authorize(agent, LOOKUP, call_id="c4")

    class Forged(Authorization):
        pass

    fields = {f.name: getattr(refused, f.name) for f in dataclasses.fields(refused) if f.name != "_use"}
    forged = Forged(**{**fields, "verdict": "allow", "audit_index": donor.audit_index}, _use=donor._use)
    with pytest.raises(Denied, match="not decided by this Gate"):
        gate.run(forged, lambda: ran.append("forged"))
    assert ran == []
    assert gate.run(donor, lambda: "donor") == "donor"  # its own use was not taken by the forgery


def test_an_allow_runs_from_another_thread_and_another_event_loop(gate: Gate) -> None:
    agent = _agent(gate)
    auth = gate.authorize(agent, LOOKUP, call_id="c1")
    out: list[object] = []
    worker = threading.Thread(target=lambda: out.append(gate.run(auth, lambda: "thread")))
    worker.start()
    worker.join()
    assert out == ["thread"]
    later = gate.authorize(agent, LOOKUP, call_id="c2")

    async def run() -> str:
        async def call() -> str:
            return "loop"

        return await gate.arun(later, call)

    assert asyncio.run(run()) == "loop"
    gate.flush()
    statuses = [e.status for e in gate.audit.entries() if e.kind == "outcome"]
    assert statuses == ["ok", "ok"]
