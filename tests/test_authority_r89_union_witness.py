"""Review R89: a child capability that no single parent capability covers is refused as
``constraint_widened`` with a concrete call the child allows; until R89 that call was checked
against the nearest parent capability only, so a child within two of them together
(``amount<=100`` and ``amount>100&amount<=500``, child ``amount<=500``) was told ``amount=500``,
which the parent's second capability allows, and to narrow to the first. The refusal stays (each
delegated capability must be within one the parent holds), the call named is one no parent
capability covers, and where no such call is found the message says the child is within no
single capability and lists all the parent holds."""

from __future__ import annotations

import json
import re

import pytest

from agentgate.authority import delegate, issue, verify_chain
from agentgate.authority._encoding import b64url_encode, canonical_json
from agentgate.authority._grant import GRANT_CONTEXT, TOKEN_PREFIX
from agentgate.capabilities import Call, Capability, covers
from agentgate.errors import ScopeCreep
from agentgate.keys import SigningKey

ROOT, ALICE, BOB = (SigningKey.generate() for _ in range(3))
NOW = 1_800_000_000
SPLIT = ["tool:pay?amount<=100", "tool:pay?amount>100&amount<=500"]


def _refusal(parent: list[str], child: list[str]) -> ScopeCreep:
    chain = issue(ROOT, ALICE.public, parent, ttl=3600, now=NOW)
    with pytest.raises(ScopeCreep) as refused:
        delegate(chain, ALICE, BOB.public, child, ttl=60, now=NOW)
    return refused.value


def test_a_child_within_two_parent_capabilities_together_is_told_so_not_a_call_the_parent_allows() -> None:
    refused = _refusal(SPLIT, ["tool:pay?amount<=500"])
    message = str(refused)
    assert refused.finding is not None and refused.finding.code == "constraint_widened"
    assert refused.finding.field == "constraints.amount"
    assert "amount=500" not in message and "narrow amount" not in message
    assert "within no single capability the parent holds" in message
    assert message.endswith("(it holds tool:pay?amount<=100, tool:pay?amount<=500&amount>100)")


@pytest.mark.parametrize(
    ("parent", "child"),
    [
        (SPLIT, ["tool:pay?amount<=1000"]),
        # The first capability's witness (amount=-1000000) is a call the second allows.
        (["tool:pay?amount>=300&fee<0", "tool:pay?amount<=100"], ["tool:pay?amount<=299"]),
        (["tool:pay?amount<=100", "tool:search"], ["tool:pay?amount<=500"]),
    ],
)
def test_the_call_named_is_one_no_parent_capability_covers(parent: list[str], child: list[str]) -> None:
    message = str(_refusal(parent, child))
    named = re.search(r"allows amount=(-?\d+),", message)
    assert named is not None, message
    call = Call.tool("pay", {"amount": int(named.group(1))})
    assert covers(Capability.parse(child[0]), call)
    assert not any(covers(Capability.parse(held), call) for held in parent), message


def test_a_hand_signed_link_is_refused_in_the_same_words_at_verification() -> None:
    """The same finding comes from verifying a chain whose link skipped ``delegate``."""
    told = str(_refusal(SPLIT, ["tool:pay?amount<=500"]))
    parent = issue(ROOT, ALICE.public, SPLIT, ttl=3600, now=NOW)
    body = json.loads(parent.root.payload)
    wider = json.loads(issue(ALICE, BOB.public, ["tool:pay?amount<=500"], ttl=60, now=NOW).root.payload)
    body.update(iss=ALICE.did, aud=BOB.did, parent=parent.root.id, depth=0, caps=wider["caps"])
    payload = canonical_json(body)
    links = [(parent.root.payload, parent.root.signature), (payload, ALICE.sign(GRANT_CONTEXT + payload))]
    token = ".".join([TOKEN_PREFIX] + [b64url_encode(part) for link in links for part in link])
    with pytest.raises(ScopeCreep) as refused:
        verify_chain(token, ROOT.public, now=NOW)
    assert str(refused.value) == told
