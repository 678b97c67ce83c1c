"""Review R74 of ``Gate.approve``'s signer narrowing (tests/test_approval_r74_signers.py): the
refusal for a policy that leaves too few keys names the resource it speaks of, and is given only
for a request still waiting (a closed one says how it was closed); a request's stored approvers
(``approval_counted``) never hold the requester's key, even when another approver name shares it
(real Gates, real SQLite and PostgreSQL stores, the payloads of real LangGraph interrupts)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from langgraph.types import Command
from test_approval_r74_signers import TWO_OF, _agent, _paused, keys, open_gate  # noqa: F401 (fixtures)

from agentgate.errors import InputError
from agentgate.gate import Approval, Gate
from agentgate.keys import SigningKey
from agentgate.store.approvals import ApprovalStore

KEYLESS_BOB = TWO_OF.replace(
    'bob: {kind: human, did: "BOB", roles: [lead]}', "bob: {kind: human, roles: [lead]}"
)
"""The refunds gate of ``TWO_OF`` (alice and bob) after bob's key was taken off the policy."""


def test_the_too_few_keys_refusal_names_the_resource(
    open_gate: Callable[[str], Gate],  # noqa: F811 (the fixture)
    keys: dict[str, SigningKey],  # noqa: F811 (the fixture)
) -> None:
    """Review R74: the refusal said the gate "applies to every call on it" without saying what
    "it" is; it names the call's resource now."""
    old = open_gate(TWO_OF)
    _, _, _, payload = _paused(old, keys)
    with pytest.raises(InputError) as refused:
        open_gate(KEYLESS_BOB).approve(payload, keys["alice"])
    message = str(refused.value)
    assert "every call on tool:payments.refund" in message, message


def test_a_request_the_resumed_run_closed_is_refused_as_closed(
    open_gate: Callable[[str], Gate],  # noqa: F811 (the fixture)
    keys: dict[str, SigningKey],  # noqa: F811 (the fixture)
) -> None:
    """Review R74: once the run resumed under a policy leaving too few keys refused the call and
    closed its request, ``gate.approve`` still said that the call "is refused when the run
    resumes, which closes the request", of a request closed already. It says the request is
    closed (nothing waits for it), as for any closed request."""
    old = open_gate(TWO_OF)
    saver, identity, config, payload = _paused(old, keys)
    new = open_gate(KEYLESS_BOB)
    yes = Approval.sign(payload, keys["alice"]).to_dict()
    _agent(new, saver).invoke(Command(resume=yes), config, context=identity)
    assert ApprovalStore(new.store).get(payload["request"]["id"]).state == "denied"
    with pytest.raises(InputError) as refused:
        new.approve(payload, keys["alice"])
    message = str(refused.value)
    assert "nothing waits for it" in message, message
    assert "when the run resumes" not in message, message


def test_an_approver_sharing_the_requesters_key_is_not_stored_among_the_counted(
    open_gate: Callable[[str], Gate],  # noqa: F811 (the fixture)
    keys: dict[str, SigningKey],  # noqa: F811 (the fixture)
) -> None:
    """Review R74: an approver name holding the requester's key (``twin``, the desk agent's key)
    can never sign for the desk's call, yet the request's stored approvers (``approval_counted``,
    which ``agentgate approval list`` reads without the policy) held the desk's DID. They are
    alice's and bob's alone now."""
    twin = TWO_OF.replace(
        "  bob: {kind: human", '  twin: {kind: human, did: "DESK", roles: [lead]}\n  bob: {kind: human'
    ).replace("approvers: [alice, bob], quorum: 2}", "approvers: [alice, bob, twin], quorum: 2}")
    gate = open_gate(twin)
    _, _, _, payload = _paused(gate, keys)
    counted = ApprovalStore(gate.store).counted_among(payload["request"]["id"])
    assert counted == {keys["alice"].did, keys["bob"].did}, counted
