"""Numbers in call arguments: an approval gate's bound compares an integer too large
for a float, a refusal names a value Python cannot write in decimal, and attenuation finds the
integers that lie between doubles beyond 2**53 (a delegation wider by them is refused)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate import Gate
from agentgate.authority import GrantRepository, Invocation, Outcome, decide, delegate, issue, record
from agentgate.capabilities import Call, Capability, attenuates, covers, witness
from agentgate.errors import ScopeCreep
from agentgate.keys import SigningKey
from agentgate.policy import PolicyIndex, parse_policy
from agentgate.store import SQLiteStore

HUGE = 10**400
"""An integer ``math.isfinite`` cannot take (``OverflowError``): a JSON tool call may carry it."""
UNWRITABLE = 10**5000
"""An integer Python refuses to write in decimal (more than 4300 digits: ``ValueError``)."""

POLICY = """
version: 1
priority_classes:
  interactive: {rank: 0}
principals:
  agent: {kind: agent, roles: [r]}
  alice: {kind: human, did: did:key:z6MkkBfAKBNKKnAqDCekq181CgEYG7u4aShm7E9yRQtUFbcj}
  bob: {kind: human, did: did:key:z6Mkn3sUaRJMRwT4iPbBtHUzTk42mHDSA3M3D8krGpZfGW8D}
models:
  m:
    cost_per_mtok: {input: 1, output: 1}
    priority_classes: [interactive]
tools:
  pay:
    args:
      amount: {type: integer, required: true}
  capped:
    args:
      amount: {type: integer, required: true}
roles:
  r:
    capabilities:
      - resource: tool:pay
      - resource: model:m
      - resource: tool:capped
        constraints:
          amount: {le: 500}
approvals:
  big-payment:
    resource: tool:pay
    when:
      amount: {gt: 1000}
    approvers: [alice, bob]
  long-answer:
    resource: model:m
    when:
      max_tokens: {gt: 1000}
    approvers: [alice, bob]
"""


@pytest.fixture(scope="module")
def index() -> PolicyIndex:
    return PolicyIndex(parse_policy(POLICY, source="numbers.yaml"))


# --- approval gates compare integers of any size -----------------------------------------------------


def test_a_gate_bound_is_met_by_an_integer_too_large_for_a_float(index: PolicyIndex) -> None:
    """``_comparable`` asked ``math.isfinite`` about the value, which raises ``OverflowError`` for
    an integer beyond a double's range: ``evaluate`` (and ``Gate.authorize``, and the LangGraph
    middleware with it) raised instead of asking for the approval. Integers compare exactly. (A
    declared tool argument that large is refused before any gate since review R58: below. One
    of more than 4,300 digits is denied before any gate since review R86c, as the Gate denies
    it: no canonical JSON writes it.)"""
    decision = index.evaluate("agent", Call.model("m", {"max_tokens": HUGE}))
    assert decision.outcome is Outcome.APPROVAL_REQUIRED, decision.reasons
    decision = index.evaluate("agent", Call.model("m", {"max_tokens": UNWRITABLE}))
    assert decision.outcome is Outcome.DENY and decision.approval is None
    assert decision.reasons[0].endswith("the Gate denies such a call (args_not_canonical)")


def test_a_declared_tool_argument_beyond_64_bits_is_refused_before_any_gate(index: PolicyIndex) -> None:
    """Review R58: a declared integer argument lies within -2**63 < v < 2**63, so a gate's bound
    never sees one beyond it: the call is denied, naming the integer's size."""
    for amount in (HUGE, -HUGE):
        decision = index.evaluate("agent", Call.tool("pay", {"amount": amount}))
        assert decision.outcome is Outcome.DENY
        assert decision.reasons == (
            "argument 'amount' is an integer of 1329 bits, beyond the range -2**63 < v < 2**63",
        )


def test_a_gate_bound_not_met_by_a_huge_negative_integer_does_not_apply(index: PolicyIndex) -> None:
    assert index.evaluate("agent", Call.model("m", {"max_tokens": -HUGE})).outcome is Outcome.ALLOW


def test_the_gate_asks_for_an_approval_of_a_huge_model_argument(tmp_path: Path) -> None:
    keys = {name: SigningKey.generate() for name in ("root", "agent", "lead")}
    text = f"""
version: 1
trust_anchors:
  root: {{did: "{keys["root"].did}"}}
principals:
  agent: {{kind: agent, did: "{keys["agent"].did}", roles: [writer]}}
  lead: {{kind: human, did: "{keys["lead"].did}"}}
models:
  big: {{cost_per_mtok: {{input: 0, output: 0}}}}
roles:
  writer:
    kind: agent
    capabilities:
      - resource: model:big
    ttl_s: 600
approvals:
  long-answers:
    resource: model:big
    when: {{max_tokens: {{gt: 4096}}}}
    approvers: [lead]
"""
    gate = Gate(parse_policy(text, source="gated.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="writer")
        auth = gate.authorize(agent, Call.model("big", {"max_tokens": HUGE}))
        assert auth.needs_approval, auth.reasons
    finally:
        gate.close()


# --- a refusal names any value ----------------------------------------------------------------------------


def test_a_rule_refusing_an_unwritable_integer_denies_and_says_why(index: PolicyIndex) -> None:
    """The reason quoted the value with ``repr``, which raises ``ValueError`` for an integer of
    more than 4300 digits: ``evaluate`` raised instead of denying."""
    decision = index.evaluate("agent", Call.tool("capped", {"amount": UNWRITABLE}))
    # A declared argument: refused for its size before its rule (review R58), named by bits.
    assert decision.outcome is Outcome.DENY and "an integer of 16610 bits" in decision.reasons[0]
    decision = index.evaluate("agent", Call.model("m", {"priority": UNWRITABLE}))
    # Undeclared: denied before its priority is read, as the Gate denies it (review R86c).
    assert decision.outcome is Outcome.DENY and "(4300 digits)" in decision.reasons[0]
    assert (
        "amount=1000 does not satisfy"
        in index.evaluate("agent", Call.tool("capped", {"amount": 1000})).reasons[0]
    )


# --- attenuation beyond 2**53 -------------------------------------------------------------------------------

NS = 1_700_000_000_000_000_000
"""A time in nanoseconds: a double, whose next double is 256 further (no double in between)."""


def _cap(spec: dict[str, int]) -> Capability:
    return Capability.of("tool:x", None, {"t": spec})


def test_a_child_wider_by_integers_between_doubles_has_a_witness() -> None:
    """``witness`` tried only doubles near the bounds; between two doubles beyond 2**53 lie
    integers, so it found no member of ``gt: NS, lt: NS + 256``, answered ``None`` (attenuates)
    and the delegation below was accepted."""
    parent, child = _cap({"le": NS}), _cap({"gt": NS, "lt": NS + 256})
    assert not attenuates(parent, child)
    found = witness(parent, child)
    assert found is not None and covers(child, found) and not covers(parent, found)


def test_a_delegation_wider_by_integers_between_doubles_is_refused(tmp_path: Path) -> None:
    root, alice, bob = SigningKey.generate(), SigningKey.generate(), SigningKey.generate()
    repo = GrantRepository(SQLiteStore(tmp_path / "agentgate.db"))
    parent = issue(root, alice.did, [_cap({"le": NS})], ttl=600)
    record(repo, parent)
    with pytest.raises(ScopeCreep, match="constraint_widened"):
        delegate(parent, alice, bob.did, [_cap({"gt": NS, "lt": NS + 256})], ttl=300)
    # What the child could have done: a call the parent refuses.
    allowed = issue(root, bob.did, [_cap({"gt": NS, "lt": NS + 256})], ttl=600)
    record(repo, allowed)
    invocation = Invocation.sign(bob, allowed, Call.tool("x", {"t": NS + 1}))
    assert decide(invocation, repo=repo, trusted=[root.did]).outcome is Outcome.ALLOW
    assert not covers(_cap({"le": NS}), Call.tool("x", {"t": NS + 1}))


def test_a_child_wider_only_by_reals_no_number_can_be_is_no_crash(tmp_path: Path) -> None:
    """``lt: NS + 1`` under ``le: NS`` is wider over the reals only: no integer and no double lies
    strictly between NS and NS + 1. ``witness`` raised ``AssertionError`` (a traceback from
    ``delegate``); it now answers ``None`` and the delegation, which covers no more calls, stands."""
    parent, child = _cap({"le": NS}), _cap({"lt": NS + 1})
    assert witness(parent, child) is None
    root, alice, bob = SigningKey.generate(), SigningKey.generate(), SigningKey.generate()
    repo = GrantRepository(SQLiteStore(tmp_path / "agentgate.db"))
    chain = issue(root, alice.did, [parent], ttl=600)
    record(repo, chain)
    narrowed = delegate(chain, alice, bob.did, [child], ttl=300)
    record(repo, narrowed)
    for t, outcome in ((NS, Outcome.ALLOW), (NS + 1, Outcome.DENY)):
        invocation = Invocation.sign(bob, narrowed, Call.tool("x", {"t": t}))
        assert decide(invocation, repo=repo, trusted=[root.did]).outcome is outcome


def test_a_set_holding_every_usual_candidate_still_has_a_witness_outside_it() -> None:
    """A parent set that lists the witness's fixed candidates (``\\x00zz-witness``, -1e300, 1e300,
    true, 0; a prefix and its usual extensions) left ``witness`` with none: it answered ``None``
    for an unconstrained child (a link that widens to every value passed) or raised."""
    fixed = Capability.of("tool:x", None, {"a": {"in": ["\x00zz-witness", -1e300, 1e300, True, 0]}})
    open_child = Capability.of("tool:x")
    found = witness(fixed, open_child)
    assert found is not None and covers(open_child, found) and not covers(fixed, found)
    listed = Capability.of("tool:x", None, {"a": {"in": ["ab", "ab\x01", "abzz-witness", "ab0"]}})
    prefix = Capability.of("tool:x", None, {"a": {"prefix": "ab"}})
    found = witness(listed, prefix)
    assert found is not None and covers(prefix, found) and not covers(listed, found)


def test_a_witness_is_found_among_integers_a_parent_set_does_not_list() -> None:
    parent = Capability.of("tool:x", None, {"t": {"in": [NS + 1, NS + 2]}})
    child = _cap({"gt": NS, "lt": NS + 4})
    found = witness(parent, child)
    assert found is not None and found.args["t"] == NS + 3
