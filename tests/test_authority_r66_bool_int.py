"""Review R66: the grant parser's one-pass path and its reference steps, and decisions under a
chain, on constraint values that mix booleans with the numbers 0 and 1 (Python's ``True == 1``,
``False == 0``).

The property tests of tests/test_authority_fastpath_generated.py draw sets of integers and
strings only, and a boolean as a lone value; here sets hold ``true`` beside ``1`` and ``false``
beside ``0``, in any order and repeated. Checked, sound: the one-pass path leaves every boolean to
the reference steps; the reference's canonical-form check (``to_dict() == raw``, a comparison
where ``True == 1``) accepts a capability only when its canonical bytes are the payload's, and a
parsed capability covers a call exactly when its raw constraint lists the call's value of the
call's kind.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentgate.authority import (
    Chain,
    ChainCache,
    GrantRepository,
    Invocation,
    Outcome,
    decide,
    delegate,
    issue,
)
from agentgate.authority._encoding import canonical_json
from agentgate.authority._parsing import _grant_from_canonical, _parse_grant_reference
from agentgate.capabilities import Call, covers
from agentgate.errors import ScopeCreep, TokenFormatError
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore

SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
NOW = 1_800_000_000
ISSUER, AUDIENCE = SigningKey(b"\x01" * 32).did, SigningKey(b"\x02" * 32).did
_MIXED = st.sampled_from([True, False, 1, 0, 2, -1, "1", "true"])
_SPEC = st.one_of(
    _MIXED.map(lambda v: {"eq": v}),
    st.lists(_MIXED, min_size=1, max_size=5).map(lambda vs: {"in": vs}),
    st.tuples(_MIXED, st.lists(_MIXED, min_size=1, max_size=4)).map(lambda p: {"eq": p[0], "in": p[1]}),
    st.tuples(_MIXED, _MIXED).map(lambda p: {"le": p[0], "ge": p[1]}),
)
_PROBES = [True, False, 1, 0, 2, -1, 1.0, 0.0, "1", "true"]


def _kind(value: object) -> str:
    return "boolean" if type(value) is bool else "text" if type(value) is str else "number"


def _lists(spec: dict[str, object], value: object) -> bool:
    """Whether ``value`` is among the values ``spec`` names, of the same kind (no bounds)."""

    def named(v: object) -> bool:
        return _kind(v) == _kind(value) and v == value

    held = [spec["eq"]] if "eq" in spec else []
    one_of = spec.get("in")
    ok = all(named(v) for v in held) if held else True
    if isinstance(one_of, list):
        ok = ok and any(named(v) for v in one_of)
    return ok


def _payload(caps: list[dict[str, object]]) -> bytes:
    body = {
        "v": 1, "iss": ISSUER, "aud": AUDIENCE, "caps": caps, "budget": None, "nbf": 100, "exp": 200,
        "depth": 2, "nonce": "0" * 32, "purpose": "", "parent": None,
    }  # fmt: skip
    return canonical_json(body)


@SETTINGS
@given(st.lists(_SPEC, min_size=1, max_size=3))
def test_the_two_grant_parsers_agree_on_booleans_beside_zero_and_one(
    specs: list[dict[str, object]],
) -> None:
    """Review R66: checked, sound: the one-pass path takes no constraint holding a boolean, and
    the reference accepts a capability only when it re-encodes to the payload's bytes (a set
    ``[1, true, 1]`` or ``[true]`` is refused as not canonical, never read as ``[1, true]`` or
    ``1``); what both take is equal, values by kind."""
    raw_caps = [{"resource": "tool:t", "action": "invoke", "constraints": {"x": spec}} for spec in specs]
    payload = _payload(raw_caps)
    fast = _grant_from_canonical(payload, bytes(64))
    try:
        reference = _parse_grant_reference(payload, bytes(64), "grant")
    except TokenFormatError:
        assert fast is None, payload
        return
    assert canonical_json([c.to_dict() for c in reference.capabilities]) == canonical_json(raw_caps)
    if fast is not None:
        listed = [v for spec in specs for vs in spec.values() for v in (vs if isinstance(vs, list) else [vs])]
        assert not any(type(v) is bool for v in listed), payload
        assert fast == reference and repr(fast) == repr(reference)
    for cap, spec in zip(reference.capabilities, specs, strict=True):
        if "le" in spec:
            continue  # bounds take numbers only: refused above unless both are numbers
        for value in _PROBES:
            assert covers(cap, Call.tool("t", {"x": value})) == _lists(spec, value), (spec, value)


def test_decisions_under_a_chain_keep_true_and_one_apart(tmp_path: Path) -> None:
    """Review R66: checked, sound, end to end: under a grant on ``x = true`` an invocation with
    ``x: 1`` is denied and one with ``x: true`` allowed, from the same cached chain in either
    order; a delegation naming ``x = 1`` under it is scope creep; under ``x in {true, 1}`` a
    child on ``x = true`` allows ``true`` and denies ``1``."""
    root, alice, bob = (SigningKey(bytes([i]) * 32) for i in range(21, 24))
    repo, cache = GrantRepository(SQLiteStore(tmp_path / "g.db")), ChainCache()

    def outcome(key: SigningKey, chain: Chain, value: object) -> Outcome:
        invocation = Invocation.sign(key, chain, Call.tool("t", {"x": value}), now=NOW + 1)
        decision = decide(invocation, repo=repo, trusted=root.public, now=NOW + 1, cache=cache)
        assert decision.outcome == Outcome.ALLOW or decision.findings[0].code == "call_not_covered", decision
        return decision.outcome

    on_true = issue(root, alice.did, ["tool:t?x=true"], ttl=600, now=NOW)
    assert [outcome(alice, on_true, v) for v in (1, True, 1.0, 1, False)] == [
        Outcome.DENY, Outcome.ALLOW, Outcome.DENY, Outcome.DENY, Outcome.DENY,
    ]  # fmt: skip
    with pytest.raises(ScopeCreep):
        delegate(on_true, alice, bob.did, ["tool:t?x=1"], ttl=60, now=NOW)
    both = issue(root, alice.did, ["tool:t?x=true|1"], ttl=600, now=NOW)
    child = delegate(both, alice, bob.did, ["tool:t?x=true"], ttl=60, now=NOW)
    assert [outcome(bob, child, v) for v in (True, 1, True)] == [Outcome.ALLOW, Outcome.DENY, Outcome.ALLOW]
    assert outcome(alice, both, 1) == Outcome.ALLOW and outcome(alice, both, 0) == Outcome.DENY
