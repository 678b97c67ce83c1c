"""``Gate.delegate``'s ``call``, which hands on again the grant delegated for
the same call by any process on the store (R38's last open LangGraph defect: a sub-agent resumed
by another process each time was asked for its approval again forever).

Holds: the same call, parent, key and terms after a restart give the same grant, with one
``allow`` entry in the log; another call, other capabilities, another budget or another key give
a fresh grant; a revoked parent, a narrowed delegation rule or an expired earlier grant are not
answered from the store (a refusal, audited, or a fresh grant); the call's text is not in the
token, only its digest.

Also R38's docs_truth xfail, fixed: ``agentgate approval list`` showed every vote given, also one a
key the policy in force no longer lists (``2/2`` on a request still waiting); the store now keeps
the approvers each request was last counted among (``approval_counted``).
"""

from __future__ import annotations

import re
import time
from datetime import timedelta

import pytest
from test_langgraph import Team, _policy_text
from test_langgraph import team as team  # the fixture

from agentgate import Gate
from agentgate.errors import AgentGateError, PolicyError, Revoked, ScopeCreep
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore, Store
from agentgate.store.approvals import ApprovalStore, QuorumRule

CAPS = ["tool:search", "model:scripted"]
CALL = "thread-1|tools:6f1c|call-0"


def _delegate(
    team: Team, *, call: str | None = CALL, caps: list[str] = CAPS, name: str = "researcher", **terms: object
) -> str:
    terms = {"key": team.keys["researcher"], "ttl": timedelta(minutes=5), **terms}
    return team.gate.delegate(team.supervisor, name=name, capabilities=caps, call=call, **terms).grant_id  # type: ignore[arg-type]


def _delegation_entries(team: Team) -> list[str]:
    team.gate.flush()
    return [e.kind for e in team.gate.audit.entries() if e.resource == "agent:researcher"]


def test_the_same_call_after_a_restart_is_handed_the_same_grant_once_audited(team: Team) -> None:
    first = _delegate(team)
    team.reopen()
    assert _delegate(team) == first
    assert _delegation_entries(team) == ["allow"]
    assert [child.grant_id for _, child in team.gate.delegations] == [first]
    assert _delegate(team) == first
    assert len(team.gate.delegations) == 1  # kept once in the live list


@pytest.mark.parametrize(
    "change",
    [
        {"call": "thread-1|tools:6f1c|call-1"},
        {"call": None},
        {"caps": ["tool:search"]},
        {"budget": 5},
    ],
)
def test_another_call_or_other_terms_get_a_fresh_grant(team: Team, change: dict[str, object]) -> None:
    first = _delegate(team)
    team.reopen()
    assert _delegate(team, **change) != first  # type: ignore[arg-type]
    assert _delegation_entries(team) == ["allow", "allow"]


def test_another_key_gets_its_own_grant(team: Team) -> None:
    # Named as no principal is: since review R65 a name the policy gives another key is refused.
    first = _delegate(team, name="helper")
    other = SigningKey.generate()
    assert _delegate(team, name="helper", key=other) != first


def test_the_call_is_signed_as_a_digest_only(team: Team) -> None:
    _delegate(team)
    child = team.gate.delegations[-1][1]
    assert CALL not in child.chain.tip.purpose and "call-0" not in child.chain.tip.purpose
    assert child.chain.tip.purpose.startswith("sub-agent researcher; call ")


def test_a_revoked_parent_is_refused_not_answered_from_the_store(team: Team) -> None:
    _delegate(team)
    team.reopen()
    team.gate.revoke(team.supervisor.grant_id, reason="stop")
    with pytest.raises(Revoked):
        _delegate(team)
    assert _delegation_entries(team) == ["allow", "deny"]


def test_a_narrowed_delegation_rule_refuses_the_grant_made_under_the_old_one(team: Team) -> None:
    _delegate(team)
    team.gate.close()
    narrowed = _policy_text({n: k.did for n, k in team.keys.items()}, 1_000_000).replace(
        "        - resource: tool:search\n        - resource: tool:publish\n        - resource: model:scripted",
        "        - resource: tool:publish",
    )
    team.gate = Gate(parse_policy(narrowed, source="team.yaml"), SQLiteStore(team.path / "agentgate.db"))
    with pytest.raises(ScopeCreep):
        _delegate(team)
    assert _delegation_entries(team) == ["allow", "deny"]


def test_an_expired_earlier_grant_is_not_handed_on(team: Team, monkeypatch: pytest.MonkeyPatch) -> None:
    first = _delegate(team, ttl=timedelta(seconds=2))
    later = time.time() + 5
    monkeypatch.setattr(time, "time", lambda: later)
    assert _delegate(team, ttl=timedelta(seconds=2)) != first


def test_a_call_that_is_not_text_is_refused_before_anything_is_written(team: Team) -> None:
    with pytest.raises(AgentGateError, match="call"):
        _delegate(team, call=7)  # type: ignore[arg-type]
    assert _delegation_entries(team) == []


# --- approval list: the votes that count (R38's docs_truth xfail) ------------------------------


def test_votes_count_among_the_voters_last_counted_and_all_without_a_rule(store: Store) -> None:
    """``ApprovalStore.votes``: a request asked without voters (by a caller that passes no rule,
    or before ``approval_counted`` existed) counts every vote; one counted under a rule counts
    its voters' only, the rule of its last count, as ``agentgate approval list`` shows."""
    approvals = ApprovalStore(store)
    bare = approvals.request("h1", "did:key:zreq", time.time() + 60, quorum=3)
    for voter in ("did:key:za", "did:key:zb"):
        approvals.approve(bare, voter)
    assert approvals.votes(bare) == (("did:key:za", "did:key:zb"), ())

    ruled = approvals.request("h2", "did:key:zreq", time.time() + 60, quorum=2, voters={"did:key:za"})
    approvals.approve(ruled, "did:key:za", rule=QuorumRule(2, frozenset({"did:key:za", "did:key:zb"})))
    assert approvals.votes(ruled) == (("did:key:za",), ())
    approvals.approve(ruled, "did:key:zc", rule=QuorumRule(2, frozenset({"did:key:zb", "did:key:zc"})))
    assert approvals.votes(ruled) == (("did:key:zc",), ("did:key:za",))
    assert [(r.id, approvals.votes(r.id)[0]) for r in approvals.open_records()] == [
        (bare, ("did:key:za", "did:key:zb")),
        (ruled, ("did:key:zc",)),
    ]
    assert approvals.prune(time.time() + 120) == 2  # the counted-among rows go with them
    assert store.query("SELECT count(*) FROM approval_counted", ())[0][0] == 0


# --- a limit written as null is refused, not read as none (after R39's fuzz finding on operators) --

_NULL_POLICY = """version: 1
trust_anchors:
  root: {did: "DID"}
principals:
  a: {kind: agent, did: "DID", roles: [r]}
tools:
  t: {TOOL}
roles:
  r:
    capabilities: [{resource: tool:t}]
    ROLE
"""


@pytest.mark.parametrize(
    ("tool", "role", "where"),
    [
        ("concurrency: ", "budget: {limit: 5, unit: calls}", "tools.t.concurrency"),
        ("rate: ~", "budget: {limit: 5, unit: calls}", "tools.t.rate"),
        ("concurrency: 2", "budget: null", "roles.r.budget"),
        ("concurrency: 2", "ttl_s: ", "roles.r.ttl_s"),
        ("concurrency: 2", "delegation: ", "roles.r.delegation"),
        ("concurrency: 2", "delegation: {max_depth: 1, max_ttl_s: }", "roles.r.delegation.max_ttl_s"),
        ("concurrency: 2", "delegation: {max_depth: 1, budget: ~}", "roles.r.delegation.budget"),
    ],
)
def test_a_limit_written_as_null_is_refused_at_its_line(tool: str, role: str, where: str) -> None:
    """``budget:`` with its value left out (a template variable never set) read as no budget at
    all: unlimited. Like a null constraint operator (tests/test_fuzz_parsers.py), it is refused,
    naming the field and its line; left out, the key still means no limit."""
    did = SigningKey.generate().did
    text = _NULL_POLICY.replace("DID", did).replace("TOOL", tool).replace("ROLE", role)
    with pytest.raises(PolicyError, match=rf"p\.yaml:\d+:\d+: {re.escape(where)}: null"):
        parse_policy(text, source="p.yaml")
    left_out = _NULL_POLICY.replace("DID", did).replace("TOOL", "").replace("ROLE", "")
    assert parse_policy(left_out, source="p.yaml").document.roles["r"].budget is None
