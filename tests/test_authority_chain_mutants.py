"""Review R47 (mutation testing of the authority core, second pass): each test kills a hand-made
mutant of the capability algebra, the chain's link checks, ``decide`` or the invocation wire
form that neither the suite nor test_authority_grant_mutants.py killed. The mutant is named in each
test's docstring, with the rule it pins (docs/token-format.md).

Chains that ``delegate`` would refuse to build are signed by hand, so that only the link check
under test can refuse them.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

import pytest

from agentgate.authority import (
    ChainCache,
    GrantRepository,
    Invocation,
    decide,
    delegate,
    issue,
    verify_chain,
)
from agentgate.authority._encoding import b64url_encode, canonical_json, sha256_hex
from agentgate.authority._grant import GRANT_CONTEXT
from agentgate.authority._invocation import INVOCATION_CONTEXT
from agentgate.capabilities import Call, Capability, Constraint, attenuates, covers, parse_capability
from agentgate.errors import AuthorityError, CapabilityError, KeyFileError, ScopeCreep, TokenFormatError
from agentgate.keys import PublicKey, SigningKey, public_key_from_did
from agentgate.store import SQLiteStore

NOW = 1_800_000_000
ROOT, ALICE, BOB, CAROL = (SigningKey(bytes([i]) * 32) for i in range(81, 85))
CAP = {"resource": "tool:pay", "action": "invoke", "constraints": {"amount": {"le": 500}}}


def _body(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "v": 1,
        "iss": ROOT.did,
        "aud": ALICE.did,
        "caps": [CAP],
        "budget": None,
        "nbf": NOW,
        "exp": NOW + 600,
        "depth": 1,
        "nonce": "0" * 32,
        "purpose": "",
        "parent": None,
    }
    body.update(changes)
    return body


def _token(*links: tuple[SigningKey, dict[str, Any]]) -> str:
    """A chain of hand-built links, each payload canonical JSON signed by the key given with it;
    each link after the first names the previous one as its parent."""
    parts = ["ag1"]
    previous: bytes | None = None
    for key, body in links:
        if previous is not None:
            body = {**body, "parent": sha256_hex(previous)}
        payload = canonical_json(body)
        parts += [b64url_encode(payload), b64url_encode(key.sign(GRANT_CONTEXT + payload))]
        previous = payload
    return ".".join(parts)


def _refusal(token: str) -> str:
    with pytest.raises(AuthorityError) as raised:
        verify_chain(token, ROOT.public, now=NOW + 1)
    return raised.value.finding.code  # type: ignore[attr-defined]


# --- link checks ------------------------------------------------------------------------------------


def test_a_link_signed_by_anyone_but_the_parents_audience_is_refused() -> None:
    """Mutant: ``link_findings`` drops the ``child.issuer != parent.audience`` check. Rule: only
    the holder of a grant may extend it; Bob, validly signing a child of Alice's grant (naming it
    as parent), gets nothing."""
    root = _body()
    hijack = _body(iss=BOB.did, aud=CAROL.did, depth=0)
    assert _refusal(_token((ROOT, root), (BOB, hijack))) == "issuer_not_parent_audience"
    verify_chain(
        _token((ROOT, root), (ALICE, _body(iss=ALICE.did, aud=CAROL.did, depth=0))), ROOT.public, now=NOW + 1
    )


def test_a_parent_allowing_no_delegation_is_named_as_such() -> None:
    """Mutant: ``link_findings`` drops the ``parent.max_depth == 0`` finding (the depth check that
    follows still refuses, as ``depth_widened``). Rule: a child of a depth-0 grant is refused as
    ``delegation_not_allowed``, the finding the docs name for it."""
    token = _token((ROOT, _body(depth=0)), (ALICE, _body(iss=ALICE.did, aud=BOB.did, depth=0)))
    assert _refusal(token) == "delegation_not_allowed"


def test_a_delegation_from_a_parent_starting_soon_starts_with_its_parent() -> None:
    """Mutant: ``delegate`` gives the child ``not_before=start`` instead of the later of now and
    the parent's start. Rule: a parent starting within the skew is delegable at once, and the
    child starts no earlier than the parent (else it is refused as ``starts_before_parent``)."""
    root = issue(ROOT, ALICE.did, ["tool:pay?amount<=500"], ttl=3600, now=NOW + 20)
    child = delegate(root, ALICE, BOB.did, ["tool:pay?amount<=100"], ttl=600, now=NOW)
    assert child.tip.not_before == NOW + 20
    verify_chain(child.token, ROOT.public, now=NOW + 20)


# --- the invocation wire form -----------------------------------------------------------------------

CALL = Call.tool("pay", {"amount": 50})


def _signed() -> tuple[Any, Invocation]:
    chain = issue(ROOT, ALICE.did, ["tool:pay?amount<=500"], ttl=3600, now=NOW)
    return chain, Invocation.sign(ALICE, chain, CALL, now=NOW)


def _wire(payload: bytes, signer: SigningKey = ALICE) -> str:
    return f"agi1.{b64url_encode(payload)}.{b64url_encode(signer.sign(INVOCATION_CONTEXT + payload))}"


def test_the_wire_form_round_trips() -> None:
    """The baseline of the refusals below: the signed invocation decodes to itself."""
    chain, inv = _signed()
    assert Invocation.decode(inv.encode(), chain, CALL) == inv
    assert Invocation.decode(_wire(canonical_json(json.loads(inv.payload))), chain, CALL) == inv


@pytest.mark.parametrize(
    "change",
    [
        {"exp": NOW + 301},  # lives 301 s
        {"v": True},  # true is not version 1
        {"extra": 1},  # a field beside the nine
        {"iss": "did:key:z6MkNotAKey"},  # an issuer that is no Ed25519 did:key
    ],
    ids=["lifetime-301", "version-true", "extra-field", "issuer-not-a-key"],
)
def test_an_invocation_outside_the_format_is_refused_on_decoding(change: dict[str, Any]) -> None:
    """Mutants: the lifetime cap dropped from the reference decoder, or widened by a second in the
    fast one; ``v: true`` taken as version 1 (reference decoder); a superset of the fields
    accepted (reference decoder); the fast decoder no longer checking the issuer is a did:key.
    Rule: ``Invocation.decode`` accepts exactly the format (1 to 300 s, version the integer 1,
    exactly the nine fields, an Ed25519 did:key issuer) and raises ``TokenFormatError`` else."""
    chain, inv = _signed()
    obj = {**json.loads(inv.payload), **change}
    with pytest.raises(TokenFormatError):
        Invocation.decode(_wire(canonical_json(obj)), chain, CALL)


def test_an_invocation_payload_not_in_canonical_form_is_refused_on_decoding() -> None:
    """Mutant: the fast decoder drops its check that orjson's sorted re-encoding is the payload.
    Rule: one spelling of each invocation (its id is the hash of the bytes): a payload with a
    space or its keys out of order is refused, not taken as the same invocation."""
    chain, inv = _signed()
    obj = json.loads(inv.payload)
    for payload in (
        json.dumps(obj, sort_keys=True).encode(),  # ", " and ": " separators
        json.dumps(dict(reversed(list(obj.items()))), separators=(",", ":")).encode(),
    ):
        assert payload != inv.payload
        with pytest.raises(TokenFormatError):
            Invocation.decode(_wire(payload), chain, CALL)


# --- decide -----------------------------------------------------------------------------------------


@pytest.fixture
def repo(sqlite_store: SQLiteStore) -> GrantRepository:
    return GrantRepository(sqlite_store)


def test_an_invocation_signed_for_one_grant_is_refused_with_another(repo: GrantRepository) -> None:
    """Mutant: ``_decide`` drops the ``inv.tip != tip.id`` check. Rule: an invocation binds the
    grant it was signed under; carried beside another chain of the same holder (one that covers
    the call too) it is refused as ``tip_mismatch``, never decided under the other grant."""
    signed_under = issue(ROOT, ALICE.did, ["tool:pay?amount<=500"], ttl=3600, now=NOW)
    other = issue(ROOT, ALICE.did, ["tool:pay?amount<=900"], ttl=3600, now=NOW)
    inv = Invocation.sign(ALICE, signed_under, CALL, now=NOW)
    assert decide(inv, repo=repo, trusted=ROOT.public, now=NOW + 1, cache=ChainCache()).allowed
    moved = replace(Invocation.sign(ALICE, signed_under, CALL, now=NOW), chain_token=other.token)
    d = decide(moved, repo=repo, trusted=ROOT.public, now=NOW + 1, cache=ChainCache())
    assert not d.allowed and d.findings[0].code == "tip_mismatch"


def test_an_invocation_signed_for_one_action_is_refused_for_another(repo: GrantRepository) -> None:
    """Mutant: ``_decide`` compares the call's resource with the signed one but not its action.
    Rule: under a grant for every action (``#*``), an invocation signed for ``invoke`` does not
    authorize ``refund`` of the same tool with the same arguments: ``call_mismatch``."""
    chain = issue(ROOT, ALICE.did, ["tool:pay#*?amount<=500"], ttl=3600, now=NOW)
    inv = Invocation.sign(ALICE, chain, CALL, now=NOW)
    other_action = replace(inv, call=Call("tool:pay", "refund", {"amount": 50}))
    d = decide(other_action, repo=repo, trusted=ROOT.public, now=NOW + 1, cache=ChainCache())
    assert not d.allowed and d.findings[0].code == "call_mismatch"
    assert decide(inv, repo=repo, trusted=ROOT.public, now=NOW + 1, cache=ChainCache()).allowed


# --- did:key ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("tail", ["\n", " ", "\t\r"])
def test_a_did_key_with_trailing_whitespace_is_refused(tail: str) -> None:
    """Mutant: ``public_key_from_did`` drops its re-encoding check (``did_from_public_key(key) !=
    did``). The base58 decoder strips trailing whitespace, so ``did + "\\n"`` decodes to the same
    key. Rule: one spelling of each did:key; a trust anchor or principal written with a stray
    newline is refused, never taken as a second name of the key."""
    assert public_key_from_did(ALICE.did) == ALICE.public.raw
    with pytest.raises(KeyFileError, match="canonical"):
        public_key_from_did(ALICE.did + tail)
    with pytest.raises(KeyFileError):
        PublicKey.from_did(ALICE.did + tail)


# --- the constraint algebra -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "bound"),
    [
        ("amount>5&amount>=5", 5),
        ("amount>=5&amount>5", 5),
        ("amount<5&amount<=5", 5),
        ("amount<=5&amount<5", 5),
    ],
)
def test_an_open_and_a_closed_bound_at_one_value_leave_the_value_out(text: str, bound: int) -> None:
    """Mutants: ``Constraint._bounds`` lets a closed bound replace an open one at the same value
    (``b >= lo`` for ``b > lo or (b == lo and is_open)``; likewise for the upper bound). Rule:
    a conjunction is the tightest of its bounds: ``amount>5&amount>=5`` refuses 5, whichever
    clause comes first."""
    cap = parse_capability("tool:pay?" + text)
    assert not covers(cap, Call.tool("pay", {"amount": bound}))
    assert not cap.constraint_map["amount"].allows(bound)
    inside = bound + 1 if ">" in text else bound - 1
    assert covers(cap, Call.tool("pay", {"amount": inside}))


def test_an_equality_beside_an_integer_upper_bound_still_binds() -> None:
    """Mutant: the shortcut in ``Constraint._normalize`` for one integer ``le`` no longer requires
    that no ``eq`` is given, so ``amount=3&amount<=10`` became ``amount<=10``. Rule: clauses on
    one field are a conjunction: only 3 passes; and ``amount=30&amount<=10`` passes nothing."""
    cap = parse_capability("tool:pay?amount=3&amount<=10")
    assert covers(cap, Call.tool("pay", {"amount": 3}))
    assert not covers(cap, Call.tool("pay", {"amount": 5}))
    assert parse_capability("tool:pay?amount=30&amount<=10").constraint_map["amount"].is_empty


def test_an_equality_beside_a_set_keeps_only_the_equal_value() -> None:
    """Mutant: ``Constraint._normalize`` takes the whole ``in`` set when an ``eq`` is also given
    (``cur=EUR&cur=EUR|USD`` became ``cur=EUR|USD``). Rule: a conjunction: only EUR passes."""
    cap = parse_capability("tool:pay?cur=EUR&cur=EUR|USD")
    assert covers(cap, Call.tool("pay", {"cur": "EUR"}))
    assert not covers(cap, Call.tool("pay", {"cur": "USD"}))


def _widening_refused(parent: str, child: str) -> None:
    p, c = parse_capability(parent), parse_capability(child)
    assert not attenuates(p, c)
    root = issue(ROOT, ALICE.did, [parent], ttl=3600, now=NOW)
    with pytest.raises(ScopeCreep):
        delegate(root, ALICE, BOB.did, [child], ttl=60, now=NOW)
    hand_built = _token(
        (ROOT, _body(caps=[p.to_dict()])),
        (ALICE, _body(iss=ALICE.did, aud=BOB.did, depth=0, caps=[c.to_dict()])),
    )
    assert _refusal(hand_built) in ("constraint_widened", "capability_widened")


def test_a_child_set_with_one_value_outside_the_parents_is_wider() -> None:
    """Mutant: ``_subset`` of a finite child asks that ``any`` value lie in the parent (for
    ``all``). Rule: ``cur=EUR|USD`` does not attenuate ``cur=EUR``: delegating it is refused."""
    _widening_refused("tool:pay?cur=EUR", "tool:pay?cur=EUR|USD")
    assert attenuates(parse_capability("tool:pay?cur=EUR|USD"), parse_capability("tool:pay?cur=EUR"))


@pytest.mark.parametrize(
    ("parent", "child"),
    [
        ("tool:pay?amount>5&amount<=10", "tool:pay?amount>=5&amount<=10"),
        ("tool:pay?amount>=0&amount<10", "tool:pay?amount>=0&amount<=10"),
        ("tool:pay?amount>5", "tool:pay?amount>=5"),
        ("tool:pay?amount<10", "tool:pay?amount<=10"),
    ],
)
def test_a_closed_bound_is_wider_than_an_open_one_at_the_same_value(parent: str, child: str) -> None:
    """Mutants: ``_subset`` of two intervals takes an equal lower (or upper) bound as inside
    whatever its openness. Rule: ``amount>=5`` holds 5, which ``amount>5`` does not: wider."""
    _widening_refused(parent, child)
    assert attenuates(parse_capability(child), parse_capability(parent))


def test_a_shorter_prefix_is_wider_than_a_longer_one() -> None:
    """Mutant: ``_subset`` of two prefixes asks whether the parent's extends the child's (swapped).
    Rule: ``path^=/tmp/`` does not attenuate ``path^=/tmp/job/``; the reverse does."""
    _widening_refused('tool:pay?path^="/tmp/job/"', 'tool:pay?path^="/tmp/"')
    assert attenuates(
        parse_capability('tool:pay?path^="/tmp/"'), parse_capability('tool:pay?path^="/tmp/job/"')
    )


def test_a_wildcard_is_never_within_an_exact_resource() -> None:
    """Mutant: ``pattern_within`` no longer refuses a wildcard child under an exact parent, and
    compares stems (``tool:pay.*`` minus one character extends ``tool:pay`` minus one). Rule: a
    wildcard names resources an exact name does not (``tool:pay.refund``): wider."""
    _widening_refused("tool:pay", "tool:pay.*")
    assert not attenuates(parse_capability("tool:pa"), parse_capability("tool:pay.*"))


@pytest.mark.parametrize(
    "spec",
    [{"eq": math.inf}, {"eq": -math.inf}, {"eq": math.nan}, {"in": [1, math.nan]}, {"in": [math.inf, 2]}],
    ids=["eq-inf", "eq-minus-inf", "eq-nan", "in-nan", "in-inf"],
)
def test_a_non_finite_value_is_refused_in_an_equality_or_a_set(spec: dict[str, Any]) -> None:
    """Mutant: ``_check_value`` drops its finiteness check for floats (the bounds stay refused by
    ``_is_number``, which the suite tested). Rule: a constraint value is a finite number, a
    string or a boolean: ``eq: inf`` or ``in: [nan]`` is refused with ``CapabilityError`` (it
    has no canonical JSON and no value equals NaN), never kept in a capability."""
    with pytest.raises(CapabilityError, match="finite"):
        Constraint.of(spec)
    with pytest.raises(CapabilityError):
        Capability.of("tool:pay", constraints={"amount": spec})
