"""Review R88: a gate's approver list is reduced to each approver once, in the order the gate
first names them, by a set of those still to take, not by looking each entry up in the list
before it. Until R88 every decision the gate applied to copied and scanned that prefix for each
entry: a gate listing its two approvers 40,000 times made one ``evaluate`` take 13 seconds.
The rule is checked here on such a list (behaviour, never timed): it pins the result, which the
quadratic version gave too, so it does not fail without the fix; the lists are kept short so the
suite stays fast."""

from __future__ import annotations

from agentgate.capabilities import Call
from agentgate.findings import Outcome
from agentgate.policy import PolicyIndex, parse_policy

ALICE = "did:key:z6Mktk1iFd7YoyEirJoqYtcfNUtMa5nUhqkrQsgX9tmc5Npj"
BOB = "did:key:z6MkqQP5oTUxZ95rgbJg29FwyrJ5N8HrRPpEBQbPrAUCkPXm"


def _index(approvers: list[str]) -> PolicyIndex:
    return PolicyIndex(
        parse_policy(
            "version: 1\ntools:\n  t: {}\nroles:\n  r:\n    capabilities: [{resource: 'tool:t'}]\n"
            "principals:\n"
            "  agent: {kind: agent, roles: [r]}\n"
            f"  alice: {{kind: human, did: '{ALICE}', roles: [r]}}\n"
            f"  bob: {{kind: human, did: '{BOB}'}}\n"
            f"approvals:\n  g: {{resource: 'tool:t', approvers: [{', '.join(approvers)}]}}\n",
            source="p.yaml",
        )
    )


def test_a_gate_listing_its_approvers_many_times_asks_each_once_in_first_named_order() -> None:
    index = _index(["bob", "alice"] * 500)
    decision = index.evaluate("agent", Call.tool("t", {}))
    assert decision.outcome is Outcome.APPROVAL_REQUIRED, decision
    assert decision.approval is not None
    assert decision.approval.approvers == ("bob", "alice")
    assert decision.approval.approver_dids == (BOB, ALICE)


def test_the_requester_leaves_a_repeated_list_and_the_rest_keep_their_order() -> None:
    index = _index(["alice", "bob"] * 500)
    decision = index.evaluate("alice", Call.tool("t", {}))
    assert decision.approval is not None, decision
    assert decision.approval.approvers == ("bob",)
    assert decision.approval.approver_dids == (BOB,)
