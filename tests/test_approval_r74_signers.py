"""Who ``Gate.approve`` signs for agrees with who the resumed run counts: every approval gate
that always applies to the call narrows the keys that may sign (as the policy combines them),
and a policy changed while a request waits, so that no approval can reach its quorum any more, is
refused with what and where instead of a yes the resumed run never counts (real Gates, real
SQLite and PostgreSQL stores, the payloads of real LangGraph interrupts)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from test_gate_r71_approve_early import POLICY, refund

from agentgate.errors import InputError
from agentgate.gate import Approval, Gate
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore, Store
from agentgate.store.approvals import ApprovalStore

NAMES = ("root", "desk", "alice", "bob", "carol")
CAROL = '  carol: {kind: human, did: "CAROL", roles: [lead]}\n'
TWO_GATES = POLICY.replace("  bob: {kind: human", CAROL + "  bob: {kind: human").replace(
    "approvers: [APPROVERS]}",
    'approvers: [alice, bob], quorum: QA}\n  second: {resource: "tool:payments.refund", '
    "approvers: [bob, carol], quorum: QB}",
)
"""Two approval gates that always apply to a refund: alice or bob, and bob or carol."""
TWO_OF = POLICY.replace("approvers: [APPROVERS]}", "approvers: [alice, bob], quorum: 2}")
"""The refunds gate asking alice and bob both (a quorum of two)."""
LOG_KEY = SigningKey.generate()


@pytest.fixture
def keys() -> dict[str, SigningKey]:
    return {name: SigningKey.generate() for name in NAMES}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def open_gate(
    request: pytest.FixtureRequest, tmp_path: Path, keys: dict[str, SigningKey]
) -> Iterator[Callable[[str], Gate]]:
    """A Gate running the policy text given (its key names replaced by the keys' DIDs), on the
    one store each Gate of the test shares: a process of one policy version."""
    url = (
        str(tmp_path / "agentgate.db")
        if request.param == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    opened: list[Gate] = []

    def store() -> Store:
        if request.param == "sqlite":
            return SQLiteStore(url)
        from agentgate.store._postgres import PostgresStore

        return PostgresStore(url)

    def gate(text: str) -> Gate:
        for name, key in keys.items():
            text = text.replace(f'"{name.upper()}"', key.did)
        opened.append(Gate(parse_policy(text, source="desk.yaml"), store(), log_key=LOG_KEY))
        return opened[-1]

    yield gate
    for each in opened:
        each.close()


def _agent(gate: Gate, saver: InMemorySaver) -> Any:
    asks = AIMessage(
        "", tool_calls=[{"name": "payments.refund", "id": "c1", "args": {"order_id": "O-1", "amount": 800}}]
    )
    return create_gated_agent(
        gate,
        name="desk",
        model=ScriptedChatModel(turns=[asks]),
        tools=[refund],
        checkpointer=saver,
        gate_models=False,
    )


def _paused(
    gate: Gate, keys: dict[str, SigningKey]
) -> tuple[InMemorySaver, Any, dict[str, Any], dict[str, Any]]:
    """The desk agent paused on the approval of one refund: its checkpointer, identity, config and
    interrupt payload."""
    saver = InMemorySaver()
    identity = gate.issue(keys["root"], name="desk", key=keys["desk"], role="desk")
    config = {"configurable": {"thread_id": "ticket-1"}}
    state = _agent(gate, saver).invoke({"messages": [("user", "refund O-1")]}, config, context=identity)
    return saver, identity, config, state["__interrupt__"][0].value


def test_a_key_only_one_of_two_gates_names_is_refused(
    open_gate: Callable[[str], Gate], keys: dict[str, SigningKey]
) -> None:
    """Review R74: two gates always apply to a refund (alice or bob; bob or carol), so only bob's
    yes meets both (the request's approvers: ``["bob"]``, and the store counts bob alone).
    ``gate.approve`` read the approvers of every gate on the resource as one list and signed
    alice's yes, which the resumed run did not count ("its approver is not one of this call's
    approvers"). Refused now, naming bob; bob's approval refunds."""
    gate = open_gate(TWO_GATES.replace("QA", "1").replace("QB", "1"))
    saver, identity, config, payload = _paused(gate, keys)
    assert payload["request"]["approvers"] == ["bob"]
    assert ApprovalStore(gate.store).counted_among(payload["request"]["id"]) == {keys["bob"].did}
    for other in ("alice", "carol"):
        with pytest.raises(InputError) as refused:
            gate.approve(payload, keys[other])
        message = str(refused.value)
        assert "not one of this call's approvers" in message and "(bob)" in message, message
    state = _agent(gate, saver).invoke(
        Command(resume=gate.approve(payload, keys["bob"])), config, context=identity
    )
    assert state["messages"][-2].content == "refunded 800.0 on O-1"


def test_a_repeated_yes_below_the_larger_quorum_of_two_gates_is_refused(
    open_gate: Callable[[str], Gate], keys: dict[str, SigningKey]
) -> None:
    """Review R74: the refunds gate asks one of bob and carol, the second gate two of them: the
    call needs bob and carol. Once bob's vote was counted (1 of 2), ``gate.approve`` signed bob's
    yes again, reading the smallest quorum of the gates (1) as met; the run counts bob once. Refused
    now as a repeated yes, naming carol; carol's yes then refunds."""
    gate = open_gate(TWO_GATES.replace("QA", "1").replace("QB", "2").replace("[alice, bob]", "[bob, carol]"))
    saver, identity, config, payload = _paused(gate, keys)
    state = _agent(gate, saver).invoke(
        Command(resume=gate.approve(payload, keys["bob"])), config, context=identity
    )
    second = state["__interrupt__"][0].value
    assert second["request"]["approved_by"] == [keys["bob"].did]
    with pytest.raises(InputError) as refused:
        gate.approve(second, keys["bob"])
    message = str(refused.value)
    assert "has already approved" in message and "(1 of 2 votes in)" in message, message
    assert "(carol)" in message, message
    state = _agent(gate, saver).invoke(
        Command(resume=gate.approve(second, keys["carol"])), config, context=identity
    )
    assert state["messages"][-2].content == "refunded 800.0 on O-1"


def test_a_policy_that_leaves_too_few_signers_refuses_to_sign_and_the_resumed_run_closes_the_request(
    open_gate: Callable[[str], Gate], keys: dict[str, SigningKey]
) -> None:
    """Review R74: a refund waits for alice and bob (a quorum of two) when the policy is changed to
    name bob without a key: one signer is left for a quorum of two, and no approval can ever count.
    ``gate.approve`` under the new policy signed alice's yes all the same, and the approver learnt
    nothing. It now refuses, naming the gate, the quorum, the keys left and what becomes of the
    call. The run resumed (with alice's yes, signed by the low-level ``Approval.sign``) is refused
    for the policy's reason, never approved by one vote, and the request is closed (``denied``),
    no longer listed as waiting."""
    old = open_gate(TWO_OF)
    saver, identity, config, payload = _paused(old, keys)
    new = open_gate(
        TWO_OF.replace('bob: {kind: human, did: "BOB", roles: [lead]}', "bob: {kind: human, roles: [lead]}")
    )
    with pytest.raises(InputError) as refused:
        new.approve(payload, keys["alice"])
    message = str(refused.value)
    assert payload["request"]["id"] in message and "not signed" in message, message
    assert "approval gate refunds" in message and "quorum of 2" in message, message
    assert "1 distinct key" in message and "refused when the run resumes" in message, message
    yes = Approval.sign(payload, keys["alice"]).to_dict()
    state = _agent(new, saver).invoke(Command(resume=yes), config, context=identity)
    assert "__interrupt__" not in state
    assert "refunded" not in state["messages"][-2].content
    assert "no approval can be valid" in state["messages"][-2].content
    approvals = ApprovalStore(new.store)
    assert approvals.get(payload["request"]["id"]).state == "denied"
    assert payload["request"]["id"] not in [r.id for r in approvals.open_records()]
