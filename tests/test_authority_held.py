"""``Authority.decide_held`` and its use in ``Gate.authorize``, attacked (from a review).

``decide_held`` verifies the chain from its token; the Gate then reserves budget, audits and binds
approvals with ``identity.chain``'s fields, so a ``Chain`` object whose links are not its token's
is refused. Held and signed decisions agree on every other input.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_gate import Setup

from agentgate.authority import Authority, Chain, GrantRepository, Invocation, delegate, issue, parse_chain
from agentgate.capabilities import Call
from agentgate.errors import AgentGateError
from agentgate.gate import AgentIdentity
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore


@pytest.fixture
def made(tmp_path: Path) -> Iterator[Setup]:
    setup = Setup(tmp_path, budget=300)
    yield setup
    setup.gate.close()


def _forged(made: Setup) -> AgentIdentity:
    """The agent's own key and its budgeted chain token, in a ``Chain`` object whose links are
    those of another grant to the same agent (ids that hold no budget row for the token)."""
    other = made.gate.issue(made.keys["root"], name="agent", key=made.keys["agent"], role="worker")
    real = made.agent.chain
    assert other.chain.ids != real.ids
    return AgentIdentity("agent", made.keys["agent"], Chain(other.chain.links, real.token))


def test_a_chain_object_whose_links_differ_from_its_token_is_refused(made: Setup) -> None:
    """The Gate would reserve budget, audit and bind approvals by the object's grants, which the
    decision never saw: refused (``tip_mismatch``), nothing reserved."""
    forged = _forged(made)
    refused = made.gate.authorize(forged, Call.model("small"), tokens=(100, 100))
    assert not refused.allowed and refused.reservations == ()
    assert [f.code for f in refused.findings] == ["tip_mismatch"]
    assert made.gate.authorize(made.agent, Call.model("small"), tokens=(100, 100)).allowed


def test_a_chain_object_whose_links_differ_from_its_token_is_audited_as_the_decided_chain(
    made: Setup,
) -> None:
    """The audit entry's chain_hash must name the grant that was actually decided (the token's tip)."""
    forged = _forged(made)
    auth = made.gate.authorize(forged, Call.tool("lookup", {"id": "1"}))
    if not auth.allowed:
        return  # refused: nothing recorded against the wrong grant
    entry = made.entries()[-1]
    assert entry.chain_hash == made.agent.chain.id


def test_decide_held_checks_that_held_and_signed_paths_share(made: Setup) -> None:
    """Held: wrong holder, a forged ``Chain`` whose *token* is another holder's, a revoked link, an
    expired chain, and a chain not issued under the anchors are all denied; a cached chain
    verified under other anchors is not reused."""
    authority: Authority = made.gate.authority
    agent_key, helper_key = made.keys["agent"], made.keys["helper"]
    chain = made.agent.chain
    call = Call.tool("lookup", {"id": "1"})
    assert authority.decide_held(agent_key, chain, call).allowed
    # the key of another principal with the agent's chain
    assert [f.code for f in authority.decide_held(helper_key, chain, call).findings] == ["wrong_holder"]
    # a chain object whose links are the helper's own grant but whose token is the agent's
    # (signed with the library's issue: since review R58 Gate.issue refuses a key the policy does not name)
    helper_chain = issue(made.keys["root"], helper_key.public, ["tool:lookup"], ttl=600)
    assert not authority.decide_held(helper_key, Chain(helper_chain.links, chain.token), call).allowed
    # expired, and not yet valid
    assert not authority.decide_held(agent_key, chain, call, now=chain.expires).allowed
    assert not authority.decide_held(agent_key, chain, call, now=chain.not_before - 10_000).allowed
    # a chain issued by a key that is not a trust anchor
    stranger = SigningKey.generate()
    foreign = issue(stranger, agent_key.did, ["tool:lookup"], ttl=60)
    assert not authority.decide_held(agent_key, foreign, call).allowed
    # ... and it stays refused after a verifier with other anchors cached it
    other = Authority(authority.repo, stranger.public)
    assert other.decide_held(agent_key, foreign, call).allowed
    assert not authority.decide_held(agent_key, foreign, call).allowed
    # revoked
    made.gate.revoke(made.agent, reason="review")
    assert [f.code for f in authority.decide_held(agent_key, chain, call).findings] == ["revoked"]
    assert parse_chain(chain.token).ids == chain.ids


# --- held and signed decisions agree on everything but the invocation ---------------------------------

_NOW = 1_800_000_000
_ROOT, _ALICE, _BOB = (SigningKey(bytes([i]) * 32) for i in range(21, 24))
_CHAIN = delegate(
    issue(_ROOT, _ALICE.did, ["tool:pay?amount<=500&cur=EUR|USD", "tool:s.*", "model:m?n>=1&n<9"], ttl=600, now=_NOW),
    _ALICE, _BOB.did, ["tool:pay?amount<=100&cur=EUR", "tool:s.web?q^=ab"], ttl=60, now=_NOW,
)  # fmt: skip
_VALUES = st.one_of(
    st.integers(-5, 600),
    st.sampled_from([100, 101, 100.0, 100.5, True, False, "EUR", "USD", "eur", "ab", "abc", "a", None]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.lists(st.integers(0, 3), max_size=2),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.sampled_from(["tool:pay", "tool:s.web", "tool:s.img", "model:m", "tool:Pay", "tool:pay "]),
    st.sampled_from(["invoke", "generate", "read"]),  # a Call refuses "*" (review R56)
    st.dictionaries(st.sampled_from(["amount", "cur", "q", "n", "x"]), _VALUES, max_size=3),
    st.sampled_from([0, 30, 59, 60, 61, -31, -29, -10_000]),
)
def test_held_and_signed_decisions_agree(
    tmp_path: Path, resource: str, action: str, args: dict[str, object], offset: int
) -> None:
    store = SQLiteStore(tmp_path / "held.db")
    authority = Authority(GrantRepository(store), _ROOT.public)
    call = Call(resource, action, args)
    now = _NOW + offset
    held = authority.decide_held(_BOB, _CHAIN, call, now=now)
    try:
        invocation = Invocation.sign(_BOB, _CHAIN, call, now=now)
    except AgentGateError:
        assert not held.allowed
        return
    signed = authority.decide(invocation, now=now)
    signed_only = {"invocation_expired", "invocation_not_yet_valid", "replayed_invocation"}
    if signed.findings and signed.findings[0].code in signed_only:
        return
    assert held.outcome == signed.outcome, (held.reasons, signed.reasons)
    assert [f.code for f in held.findings] == [f.code for f in signed.findings]
    if held.allowed:
        assert held.args_digest == signed.args_digest and held.budgets == signed.budgets


def test_arguments_without_a_canonical_form_are_a_recorded_refusal_not_a_unicode_error(made: Setup) -> None:
    """HIGH (found, regression): a lone surrogate in a tool argument. ``decide_held`` denies it
    (``args_not_canonical``), then recording the refusal digests the arguments with the audit
    module's ``canonical_json``, whose ``str.encode`` raises ``UnicodeEncodeError`` out of
    ``Gate.authorize`` (not an ``AgentGateError``; nothing audited). Before this session the
    Gate's ``Invocation.sign`` raised ``TokenFormatError``. ``authorize`` promises never to raise
    for a refused call."""
    auth = made.gate.authorize(made.agent, Call.tool("lookup", {"id": "\ud800"}))
    assert not auth.allowed and auth.audit_index is not None
