"""The Gate under concurrency, as a production deployment meets it.

Several processes share one store (each has its own ``Gate``, whose memory the others never
see), and threads of one process call a gate while it closes. The store is the authority: what
one process remembers must never contradict what another has committed since.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from _forked import Worker

from agentgate.capabilities import Call
from agentgate.dispatch.dispatcher import Dispatcher
from agentgate.errors import SchedulingError
from agentgate.gate import AgentIdentity, Approval, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog
from agentgate.store.ledger import BudgetLedger

POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker]}}
  lead: {{kind: human, did: "{lead}", roles: [lead]}}
tools:
  refund:
    args: {{amount: {{type: integer, required: true}}}}
    loggable: [amount]
roles:
  worker:
    kind: agent
    capabilities:
      - resource: tool:refund
        constraints: {{amount: {{le: 1000}}}}
    budget: {{limit: 1000, unit: calls}}
    ttl_s: 600
  lead:
    kind: human
    capabilities:
      - resource: tool:refund
    ttl_s: 600
approvals:
  big-refund:
    resource: tool:refund
    when: {{amount: {{gt: 100}}}}
    approvers: [lead]
"""

BIG = Call.tool("refund", {"amount": 500})

# Another process (``_forked.Worker``) with a gate of its own on the same store: it decides the
# same call for the same agent, then declines the approval it asks for, or runs the call with an
# approval.
OTHER_PROCESS = r"""
import json, sys
from agentgate.authority import parse_chain
from agentgate.capabilities import Call
from agentgate.gate import AgentIdentity, Approval, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

job = json.loads(sys.argv[1])
gate = Gate(parse_policy(job["policy"], source="policy.yaml"), SQLiteStore(job["store"]),
            log_key=SigningKey(bytes.fromhex(job["log_key"])))
agent = AgentIdentity("agent", SigningKey(bytes.fromhex(job["agent"])), parse_chain(job["chain"]))
call = Call.tool("refund", {"amount": 500})
if job["do"] == "decline":
    asked = gate.authorize(agent, call, call_id="c1")
    gate.decline(asked, "not today")
    out = {"declined": asked.request["id"], "asked_again": gate.authorize(agent, call, call_id="c1").request["id"]}
else:
    allowed = gate.authorize(agent, call, call_id="c1", approval=Approval.parse(job["approval"]))
    gate.run(allowed, lambda: "refunded")
    out = {"verdict": allowed.verdict}
gate.close()
print(json.dumps(out))
"""


class Deployment:
    """A store file and this process's gate on it; ``other`` runs a job in another process."""

    def __init__(self, tmp_path: Path) -> None:
        self.keys = {n: SigningKey.generate() for n in ("root", "agent", "lead")}
        self.policy = POLICY.format(**{n: k.did for n, k in self.keys.items()})
        self.path = tmp_path / "agentgate.db"
        self.log_key = SigningKey.generate()
        self.gate = Gate(
            parse_policy(self.policy, source="policy.yaml"), SQLiteStore(self.path), log_key=self.log_key
        )
        self.agent = self.gate.issue(self.keys["root"], name="agent", key=self.keys["agent"], role="worker")

    def other(self, do: str, approval: dict[str, str] | None = None) -> dict[str, Any]:
        job = {
            "do": do,
            "policy": self.policy,
            "store": str(self.path),
            "log_key": self.log_key.seed.hex(),
            "agent": self.keys["agent"].seed.hex(),
            "chain": self.agent.chain.token,
            "approval": approval,
        }
        return Worker(self.path.parent, OTHER_PROCESS, [json.dumps(job)]).result()


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    made = Deployment(tmp_path)
    yield made
    made.gate.close()


def test_a_request_declined_in_another_process_is_not_handed_out_again(deployment: Deployment) -> None:
    gate, agent = deployment.gate, deployment.agent
    asked = gate.authorize(agent, BIG, call_id="c1")
    assert asked.needs_approval and asked.request is not None
    other = deployment.other("decline")
    assert other["declined"] == asked.request["id"]
    # The same call asked again here is the request the other process opened after declining,
    # never the declined one this process asked first (no approval of it can ever be used).
    again = gate.authorize(agent, BIG, call_id="c1")
    assert again.needs_approval and again.request is not None
    assert again.request["id"] == other["asked_again"] != asked.request["id"]
    approval = Approval.sign(again.approval_payload(), deployment.keys["lead"])
    assert gate.authorize(agent, BIG, call_id="c1", approval=approval).allowed


def test_an_approval_used_in_another_process_names_the_entry_that_asked_for_it(
    deployment: Deployment,
) -> None:
    gate = deployment.gate
    asked = gate.authorize(deployment.agent, BIG, call_id="c1")
    assert asked.needs_approval and asked.audit_index is not None
    approval = gate.approve(asked.approval_payload(), deployment.keys["lead"])
    assert deployment.other("run", approval) == {"verdict": "allow"}
    gate.flush()
    (given,) = [e for e in gate.audit.entries() if e.kind == "approval_given"]
    assert given.ref == asked.audit_index  # docs/langgraph.md: it refers to the approval_required entry
    assert gate.verify().ok


class _ClosingDispatcher:
    """A dispatcher whose shutdown waits until the test lets it go: ``Gate.close`` pauses there."""

    def __init__(self) -> None:
        self.closing = threading.Event()
        self.release = threading.Event()
        self.model_slo_ttft_s: dict[str, float] = {}  # Gate.attach_dispatcher adds the policy's

    async def start(self) -> None:
        return None

    async def aclose(self) -> None:
        self.closing.set()
        await asyncio.get_running_loop().run_in_executor(None, self.release.wait, 10)


def test_a_call_refused_while_the_gate_closes_is_recorded_and_releases_its_reservation(
    tmp_path: Path,
) -> None:
    """An allow decided in one thread reaches ``run`` while another thread closes the gate: the run
    is refused, recorded as an ``error`` outcome and its reservation released (``Gate.close``),
    not left without an outcome, holding its budget for ever."""
    keys = {n: SigningKey.generate() for n in ("root", "agent", "lead")}
    log_key = SigningKey.generate()
    policy = parse_policy(POLICY.format(**{n: k.did for n, k in keys.items()}), source="policy.yaml")
    gate = Gate(policy, SQLiteStore(tmp_path / "agentgate.db"), log_key=log_key)
    dispatcher = _ClosingDispatcher()
    gate.attach_dispatcher(cast(Dispatcher, dispatcher))
    agent: AgentIdentity = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
    allowed = gate.authorize(agent, Call.tool("refund", {"amount": 5}), call_id="c1")
    assert allowed.allowed and allowed.reservations
    closer = threading.Thread(target=gate.close)
    closer.start()
    try:
        assert dispatcher.closing.wait(10)
        with pytest.raises(SchedulingError):
            gate.run(allowed, lambda: "refunded")
    finally:
        dispatcher.release.set()
        closer.join(10)
    assert not closer.is_alive()
    store = SQLiteStore(tmp_path / "agentgate.db")
    try:
        outcomes = [e for e in AuditLog(store, log_key).entries() if e.kind == "outcome"]
        assert [(e.ref, e.status) for e in outcomes] == [(allowed.audit_index, "error")]
        ((reservation, _, _),) = allowed.reservations
        assert BudgetLedger(store).reservation(reservation).state == "released"
    finally:
        store.close()
