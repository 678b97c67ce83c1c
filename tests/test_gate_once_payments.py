"""Calls that must run once, retries and dead letters, as a payments team relies on
them (docs/tasks.md "Retries and the safety rules", docs/langgraph.md "Scheduling and retries").
Each test is a defect found by running the Gate on the SQLite store."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from langgraph.errors import GraphInterrupt

from agentgate.capabilities import Call
from agentgate.errors import CircuitOpen
from agentgate.gate import AgentIdentity, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore
from agentgate.store.dead_letters import DeadLetterStore
from agentgate.store.once import settle

POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker]}}
tools:
  pay:
    args: {{amount: {{type: integer, required: true}}}}
  notify:
    args: {{to: {{type: string, required: true}}}}
  lookup:
    args: {{id: {{type: string, required: true}}}}
    idempotent: true
    retry: {{attempts: 3, retry_on: [transient, timeout, error], backoff_initial_s: 0.001}}
roles:
  worker:
    kind: agent
    capabilities: [{{resource: tool:pay}}, {{resource: tool:notify}}, {{resource: tool:lookup}}]
    budget: {{limit: 100, unit: calls}}
    ttl_s: 600
"""

RUN = "thread-1|tools:task-1"
PAY = Call.tool("pay", {"amount": 40})


@pytest.fixture
def payer(tmp_path: Path) -> Iterator[tuple[Gate, AgentIdentity]]:
    keys = {name: SigningKey.generate() for name in ("root", "agent")}
    text = POLICY.format(root=keys["root"].did, agent=keys["agent"].did)
    gate = Gate(parse_policy(text, source="once.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    try:
        yield gate, gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
    finally:
        gate.close()


def test_a_payment_whose_nested_call_was_refused_after_it_paid_is_not_run_again(
    payer: tuple[Gate, AgentIdentity],
) -> None:
    gate, agent = payer

    def smtp_down() -> None:
        raise ConnectionRefusedError("smtp down")

    for number in range(5):  # the notify tool's breaker opens (failure_threshold 5)
        notify = gate.authorize(agent, Call.tool("notify", {"to": "x"}), call_id=f"n{number}", run_id=RUN)
        with contextlib.suppress(ConnectionRefusedError):
            gate.run(notify, smtp_down, call_id=f"n{number}", run_id=RUN)
    paid: list[int] = []

    def pay() -> str:
        paid.append(40)  # the payment went through; then its receipt, a nested gated call, is refused
        receipt = gate.authorize(agent, Call.tool("notify", {"to": "customer"}), call_id="r1", run_id=RUN)
        return gate.run(receipt, lambda: "sent", call_id="r1", run_id=RUN)

    for _ in range(2):  # the run is resumed: the same call is decided again
        auth = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)
        if auth.allowed:
            with contextlib.suppress(CircuitOpen):
                gate.run(auth, pay, call_id="c1", run_id=RUN)
    assert paid == [40]


def test_a_tool_that_pauses_is_neither_retried_nor_a_dead_letter(payer: tuple[Gate, AgentIdentity]) -> None:
    gate, agent = payer
    ran: list[str] = []

    def ask() -> str:
        ran.append("asked")
        raise GraphInterrupt(())  # what LangGraph's interrupt() raises inside a tool

    auth = gate.authorize(agent, Call.tool("lookup", {"id": "o-1"}), call_id="c1", run_id=RUN)
    with pytest.raises(GraphInterrupt):
        gate.run(auth, ask, call_id="c1", run_id=RUN, paused=lambda exc: isinstance(exc, GraphInterrupt))
    gate.flush()
    (outcome,) = [e for e in gate.audit.entries() if e.kind == "outcome"]
    assert outcome.status == "paused"
    assert ran == ["asked"]
    assert DeadLetterStore(gate.store).recent() == []


async def test_a_tool_that_pauses_under_arun_is_neither_retried_nor_a_dead_letter(
    payer: tuple[Gate, AgentIdentity],
) -> None:
    gate, agent = payer
    ran: list[str] = []

    async def ask() -> str:
        ran.append("asked")
        raise GraphInterrupt(())

    auth = gate.authorize(agent, Call.tool("lookup", {"id": "o-1"}), call_id="c1", run_id=RUN)
    with pytest.raises(GraphInterrupt):
        await gate.arun(
            auth, ask, call_id="c1", run_id=RUN, paused=lambda exc: isinstance(exc, GraphInterrupt)
        )
    gate.flush()
    (outcome,) = [e for e in gate.audit.entries() if e.kind == "outcome"]
    assert outcome.status == "paused"
    assert ran == ["asked"]
    assert DeadLetterStore(gate.store).recent() == []


def test_a_failed_payment_settled_as_not_run_runs_when_decided_again(
    payer: tuple[Gate, AgentIdentity],
) -> None:
    gate, agent = payer
    answers = iter(["psp: try later", "paid"])
    ran: list[str] = []

    def pay() -> str:
        ran.append(answer := next(answers))
        return answer

    def declined(result: str) -> bool:
        return result != "paid"

    first = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)
    assert gate.run(first, pay, call_id="c1", run_id=RUN, failed=declined) == "psp: try later"
    gate.flush()
    (failed,) = gate.once.unsettled()
    settle(
        gate.store, gate.audit, failed.key, ran=False, by="ops", reason="the PSP has no charge", min_age_s=0
    )
    again = gate.authorize(agent, PAY, call_id="c1", run_id=RUN)
    assert again.allowed  # as docs/langgraph.md says: it may be decided and run again
    assert gate.run(again, pay, call_id="c1", run_id=RUN, failed=declined) == "paid"
    assert ran == ["psp: try later", "paid"]
