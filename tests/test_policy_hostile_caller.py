"""The authority core and the policy language against a hostile caller.

Each test here either reproduces a defect found in review (and now fixed) or checks, against a
naive reference written from the documents alone, a promise the other test files leave open.
"""

from __future__ import annotations

import json
import math
import operator
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgate.authority import ChainCache, GrantRepository, Invocation, decide, issue
from agentgate.authority._invocation import INVOCATION_CONTEXT
from agentgate.capabilities import (
    Call,
    Capability,
    Constraint,
    attenuates,
    capability_from_canonical,
    covers,
    witness,
)
from agentgate.gate import Approval, Gate
from agentgate.keys import SigningKey
from agentgate.policy import Outcome, PolicyIndex, parse_policy
from agentgate.policy._index import _compile, _passes
from agentgate.policy._lint import lint
from agentgate.policy._load import RuleRef
from agentgate.store import SQLiteStore

# --- the policy index against a naive reading of the YAML -------------------------------------

_DID = "did:key:z6MkqQP5oTUxZ95rgbJg29FwyrJ5N8HrRPpEBQbPrAUCkPXm"
_APPROVER_DIDS = (
    "did:key:z6MkkBfAKBNKKnAqDCekq181CgEYG7u4aShm7E9yRQtUFbcj",
    "did:key:z6Mkn3sUaRJMRwT4iPbBtHUzTk42mHDSA3M3D8krGpZfGW8D",
    "did:key:z6MkwEfJ4V5uWJ8dwxr6F8ASUA2f4jgYi6guf8KgTQBmaQ5a",
)

_TWO_GATES = """
version: 1
principals:
  agent: {kind: agent, did: DID, roles: [r]}
  finance: {kind: human, did: FINANCE, roles: []}
  compliance: {kind: human, did: COMPLIANCE, roles: []}
  auditor: {kind: human, did: AUDITOR, roles: []}
tools:
  payments.refund: {args: {amount: {type: integer}}}
roles:
  r:
    ttl_s: 60
    capabilities: [{resource: "tool:payments.refund"}]
approvals:
  large: {resource: "tool:payments.refund", when: {amount: {gt: 1000}}, approvers: [finance, auditor]}
  every-payment: {resource: "tool:payments.*", approvers: [compliance, auditor], expiry_s: 60}
"""
for _name, _did in zip(("FINANCE", "COMPLIANCE", "AUDITOR"), _APPROVER_DIDS, strict=True):
    _TWO_GATES = _TWO_GATES.replace(_name, _did)
_TWO_GATES = _TWO_GATES.replace("DID", _DID)


def test_every_approval_gate_that_applies_is_enforced_not_only_the_first() -> None:
    """Two gates guard a large refund; the decision used to carry only the first (``large``), so
    finance alone could approve a payment that the ``every-payment`` gate reserves to compliance.
    Now one requirement stands for both: only approvers named by every gate, the larger quorum,
    the shorter expiry; and when no approver is named by all of them, the call is denied."""
    index = PolicyIndex(parse_policy(_TWO_GATES))
    small = index.evaluate("agent", Call.tool("payments.refund", {"amount": 5}))
    assert small.outcome is Outcome.APPROVAL_REQUIRED and small.approval is not None
    assert small.approval.approvers == ("compliance", "auditor")
    large = index.evaluate("agent", Call.tool("payments.refund", {"amount": 5000}))
    assert large.outcome is Outcome.APPROVAL_REQUIRED and large.approval is not None
    assert large.approval.approvers == ("auditor",), large.approval
    assert large.approval.expiry_s == 60 and large.approval.quorum == 1
    assert "large" in large.approval.gate and "every-payment" in large.approval.gate

    disjoint = parse_policy(_TWO_GATES.replace("[finance, auditor]", "[finance]"))
    refused = PolicyIndex(disjoint).evaluate("agent", Call.tool("payments.refund", {"amount": 5000}))
    assert refused.outcome is Outcome.DENY, refused
    assert any("no approval can satisfy them all" in r for r in refused.reasons)


def test_an_approver_named_twice_counts_once_toward_the_quorum() -> None:
    """``approvers: [auditor, auditor, agent]`` with a quorum of 2 asked by ``agent``: only one
    distinct approver is left, so no approval can ever be valid: a deny that says so, not an
    approval request that can never complete."""
    text = _TWO_GATES.replace("[finance, auditor]}", "[auditor, auditor, agent], quorum: 2}")
    decision = PolicyIndex(parse_policy(text)).evaluate(
        "agent", Call.tool("payments.refund", {"amount": 5000})
    )
    assert decision.outcome is Outcome.DENY and "no approval can be valid" in decision.reasons[-1]


# A random policy over a fixed vocabulary: three tools with typed arguments, one model, a GPU;
# up to four roles (a role inherits only later ones, so there is no cycle), three principals
# each holding up to three roles, and up to three approval gates.

_TOOLS: dict[str, dict[str, Any]] = {
    "pay.refund": {"amount": {"type": "number", "required": True}, "cur": {"type": "string"}},
    "pay.void": {"amount": {"type": "integer"}, "cur": {"type": "string"}},
    "crm.read": {"q": {"type": "string"}, "n": {"type": "integer"}},
}
_ARG_TYPES = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,)}
_PATTERNS = [
    "tool:*",
    "tool:pay.*",
    "tool:pay.refund",
    "tool:pay.void",
    "tool:crm.read",
    "tool:crm.*",
    "model:*",
    "model:m.small",
    "gpu:h100",
    "gpu:*",
]
_NUMBERS = st.one_of(
    st.integers(-3, 3),
    st.sampled_from([2**53 + 1, 2**63 - 1, -0.0, 0.5, 2.5, 123456.5]),
)
_STRINGS = st.sampled_from(["", "E", "EUR", "USD", "e\u0301", "\u00e9"])


@st.composite
def _constraint(draw: st.DrawFn, kind: str) -> dict[str, Any]:
    ops = ["eq", "in", "lt", "le", "gt", "ge"] if kind != "string" else ["eq", "in", "prefix"]
    spec: dict[str, Any] = {}
    for op in draw(st.sets(st.sampled_from(ops), min_size=1, max_size=2)):
        values = _STRINGS if kind == "string" else _NUMBERS
        if op == "in":
            spec[op] = draw(st.lists(values, min_size=1, max_size=3))
        else:
            spec[op] = draw(values)
    return spec


@st.composite
def _rule(draw: st.DrawFn) -> dict[str, Any]:
    resource = draw(st.sampled_from(_PATTERNS))
    rule: dict[str, Any] = {"resource": resource}
    name = resource.partition(":")[2]
    declared = _TOOLS.get(name) if resource.startswith("tool:") else None
    if declared:
        arg = draw(st.sampled_from(sorted(declared)))
        if draw(st.booleans()):
            rule["constraints"] = {arg: draw(_constraint(declared[arg]["type"]))}
    if draw(st.integers(0, 5)) == 0:
        rule["action"] = draw(st.sampled_from(["*", "read"]))
    return rule


@st.composite
def _policies(draw: st.DrawFn) -> dict[str, Any]:
    n_roles = draw(st.integers(1, 4))
    roles: dict[str, Any] = {}
    for i in range(n_roles):
        later = [f"r{j}" for j in range(i + 1, n_roles)]
        role: dict[str, Any] = {"ttl_s": 60, "capabilities": draw(st.lists(_rule(), max_size=3))}
        if later:
            role["inherits"] = draw(st.lists(st.sampled_from(later), unique=True, max_size=2))
        roles[f"r{i}"] = role
    principals = {
        f"p{i}": {
            "kind": "agent",
            "roles": draw(st.lists(st.sampled_from(sorted(roles)), unique=True, max_size=3)),
        }
        for i in range(3)
    }
    for i, spec in enumerate(principals.values()):
        if draw(st.integers(0, 3)):  # most have a key of their own; a keyless one cannot approve
            spec["did"] = _APPROVER_DIDS[i]
    approvals: dict[str, Any] = {}
    for i in range(draw(st.integers(0, 3))):
        resource = draw(st.sampled_from(["tool:*", "tool:pay.*", "tool:pay.refund", "tool:crm.read"]))
        gate: dict[str, Any] = {
            "resource": resource,
            "approvers": draw(st.lists(st.sampled_from(sorted(principals)), unique=True, min_size=1)),
        }
        gate["quorum"] = draw(st.integers(1, len(gate["approvers"])))
        if draw(st.booleans()):
            arg, kind = draw(st.sampled_from([("amount", "number"), ("cur", "string"), ("q", "string")]))
            gate["when"] = {arg: draw(_constraint(kind))}
        approvals[f"g{i}"] = gate
    return {
        "version": 1,
        "principals": principals,
        "tools": {name: {"args": args} for name, args in _TOOLS.items()},
        "models": {"m.small": {"cost_per_mtok": {"input": 1, "output": 1}}},
        "roles": roles,
        "approvals": approvals,
    }


_CALL_VALUES = st.one_of(
    _NUMBERS, _STRINGS, st.booleans(), st.sampled_from([-1e300, 2**70, 2**53, float(2**53), 7])
)


@st.composite
def _calls(draw: st.DrawFn) -> tuple[str, Call]:
    principal = draw(st.sampled_from(["p0", "p1", "p2", "nobody"]))
    resource = draw(
        st.sampled_from(
            [
                "tool:pay.refund",
                "tool:pay.void",
                "tool:crm.read",
                "tool:pay.other",
                "model:m.small",
                "model:m.big",
                "gpu:h100",
                "gpu:a100",
            ]
        )
    )
    kind = resource.partition(":")[0]
    action = draw(st.sampled_from([{"tool": "invoke", "model": "generate", "gpu": "lease"}[kind], "read"]))
    args = draw(st.dictionaries(st.sampled_from(["amount", "cur", "q", "n", "x"]), _CALL_VALUES, max_size=3))
    return principal, Call(resource, action, args)


def _closure(doc: dict[str, Any], role: str) -> list[str]:
    out = [role]
    for parent in doc["roles"][role].get("inherits", []):
        out += [r for r in _closure(doc, parent) if r not in out]
    return out


def _reference(doc: dict[str, Any], principal: str, call: Call) -> Outcome:
    """The outcome read naively off the YAML (docs/policy-reference.md, "Deciding"): default
    deny; the tool's declared argument types; any rule of any role held (inherited ones too)
    that covers the call allows it; then EVERY approval gate on the resource whose ``when``
    holds (a missing or incomparable argument counts as holding) must be passed, by approvers
    other than the requester."""
    spec = doc["principals"].get(principal)
    kind, _, name = call.resource.partition(":")
    if spec is None:
        return Outcome.DENY
    if kind == "tool":
        declared = _TOOLS.get(name)
        if declared is None:
            return Outcome.DENY
        for arg, value in call.args.items():
            if arg not in declared or type(value) not in _ARG_TYPES[declared[arg]["type"]]:
                return Outcome.DENY
            if type(value) is int and not -(2**63) < value < 2**63:  # refused: docs/policy-reference.md
                return Outcome.DENY
        if any(d.get("required") and arg not in call.args for arg, d in declared.items()):
            return Outcome.DENY
    if kind == "model" and name != "m.small":
        return Outcome.DENY
    roles: list[str] = []
    for held in spec["roles"]:
        roles += [r for r in _closure(doc, held) if r not in roles]
    rules = [rule for role in roles for rule in doc["roles"][role]["capabilities"]]
    default = {"tool": "invoke", "model": "generate", "gpu": "lease"}
    allowed = False
    for rule in rules:
        resource = rule["resource"]
        rkind = resource.partition(":")[0]
        if resource.endswith("*"):
            stem = resource[:-1]
            matches = call.resource.startswith(stem) and len(call.resource) > len(stem)
        else:
            matches = resource == call.resource
        action = rule.get("action", default[rkind])
        if not matches or action not in ("*", call.action):
            continue
        if all(
            arg in call.args and _holds(Constraint.of(c), call.args[arg])
            for arg, c in rule.get("constraints", {}).items()
        ):
            allowed = True
            break
    if not allowed:
        return Outcome.DENY
    approver_sets: list[set[str]] = []
    quorum = 0
    for gate in doc["approvals"].values():
        stem = gate["resource"][:-1]
        on = (
            call.resource.startswith(stem) and len(call.resource) > len(stem)
            if gate["resource"].endswith("*")
            else gate["resource"] == call.resource
        )
        if on and all(
            arg not in call.args
            or not _comparable(c, call.args[arg])
            or _holds(Constraint.of(c), call.args[arg])
            for arg, c in gate.get("when", {}).items()
        ):
            approvers = set(gate["approvers"]) - {principal}
            if len(approvers) < gate["quorum"]:
                return Outcome.DENY
            approver_sets.append(approvers)
            quorum = max(quorum, gate["quorum"])
    if not approver_sets:
        return Outcome.ALLOW
    approvers = set.intersection(*approver_sets)
    signers = {doc["principals"][a].get("did") for a in approvers} - {None}
    return Outcome.APPROVAL_REQUIRED if min(len(approvers), len(signers)) >= quorum else Outcome.DENY


def _holds(constraint: Constraint, value: object) -> bool:
    return covers_value(constraint, value)


def covers_value(constraint: Constraint, value: object) -> bool:
    """The constraint read operator by operator (not through its normal form)."""
    spec = constraint.to_dict()
    number = type(value) in (int, float) and math.isfinite(value)  # type: ignore[arg-type]
    checks = {
        "eq": lambda b: _same(value, b),
        "in": lambda b: any(_same(value, v) for v in b),
        "prefix": lambda b: isinstance(value, str) and value.startswith(b),
        "lt": lambda b: number and value < b,
        "le": lambda b: number and value <= b,
        "gt": lambda b: number and value > b,
        "ge": lambda b: number and value >= b,
    }
    return all(checks[op](bound) for op, bound in spec.items())


def _same(a: object, b: object) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return isinstance(a, str) == isinstance(b, str) and a == b


def _comparable(spec: dict[str, Any], value: object) -> bool:
    bounded = any(op in spec for op in ("lt", "le", "gt", "ge"))
    if bounded and (type(value) not in (int, float) or not math.isfinite(value)):  # type: ignore[arg-type]
        return False
    return "prefix" not in spec or isinstance(value, str)


@settings(max_examples=200, deadline=None)
@given(doc=_policies(), calls=st.lists(_calls(), min_size=1, max_size=8))
def test_the_index_agrees_with_a_naive_reading_of_the_yaml(
    doc: dict[str, Any], calls: list[tuple[str, Call]]
) -> None:
    policy = parse_policy(json.dumps(doc))
    index = PolicyIndex(policy)
    for principal, call in calls:
        decision = index.evaluate(principal, call)
        assert decision.outcome is _reference(doc, principal, call), (principal, call, decision.reasons)
        if decision.outcome is not Outcome.DENY:
            assert decision.rule is not None and covers(decision.rule.capability, call)


# --- authority: invocations and grants at their edges --------------------------------------------

NOW = 1_800_000_000
ROOT, ALICE, BOB, CAROL = (SigningKey(bytes([i]) * 32) for i in range(41, 45))
PAY = Call.tool("pay", {})


def _resigned(inv: Invocation, key: SigningKey, **fields: Any) -> Invocation:
    """``inv`` with ``fields`` changed and signed again by ``key`` (what its holder could do)."""
    edited = replace(inv, **fields)
    return replace(edited, signature=key.sign(INVOCATION_CONTEXT + edited.payload))


def test_an_invocation_that_claims_to_live_longer_than_300_s_is_denied(sqlite_store: SQLiteStore) -> None:
    """``decide`` took a hand-built invocation valid for 10**6 s (the wire form refuses it). As the
    1,024th nonce recorded, its expiry set the store's prune cut-off an hour before it, which
    deleted every live nonce: a captured invocation of another agent could then be replayed."""
    repo = GrantRepository(sqlite_store)
    cache = ChainCache()
    for_alice = issue(ROOT, ALICE.did, ["tool:pay"], ttl=10**7, now=NOW)
    for_bob = issue(ROOT, BOB.did, ["tool:pay"], ttl=10**7, now=NOW)
    captured = Invocation.sign(ALICE, for_alice, PAY, now=NOW)
    assert decide(captured, repo=repo, trusted=ROOT.public, now=NOW, cache=cache).allowed
    for _ in range(1022):
        inv = Invocation.sign(BOB, for_bob, PAY, now=NOW)
        assert decide(inv, repo=repo, trusted=ROOT.public, now=NOW, cache=cache).allowed
    long_lived = _resigned(Invocation.sign(BOB, for_bob, PAY, now=NOW), BOB, expires=NOW + 10**6)
    refused = decide(long_lived, repo=repo, trusted=ROOT.public, now=NOW, cache=cache)
    assert refused.outcome is Outcome.DENY and refused.findings[0].code == "invocation_lifetime"
    replay = decide(captured, repo=repo, trusted=ROOT.public, now=NOW + 5, cache=cache)
    assert replay.outcome is Outcome.DENY and replay.findings[0].code == "replayed_invocation"
    # Exactly 300 s is allowed; 301 s, or an expiry not after the signing time, is not.
    edge = _resigned(Invocation.sign(BOB, for_bob, PAY, now=NOW), BOB, expires=NOW + 300)
    assert decide(edge, repo=repo, trusted=ROOT.public, now=NOW, cache=cache).allowed
    for expires in (NOW + 301, NOW):
        bad = _resigned(Invocation.sign(BOB, for_bob, PAY, now=NOW), BOB, expires=expires)
        assert not decide(bad, repo=repo, trusted=ROOT.public, now=NOW - 1, cache=cache).allowed


# --- the capability algebra at its edges -------------------------------------------------------------

_EDGE_NUMBERS = st.one_of(
    st.integers(-3, 3),
    st.sampled_from([2**53 - 1, 2**53, 2**53 + 1, 2**63 - 1, -(2**63) + 1]),
    st.sampled_from(
        [-0.0, 0.5, float(2**53), 9.2e18, 1e308, 5e-324, math.nextafter(5, 6), 4.999999999999999]
    ),
    st.floats(allow_nan=False, allow_infinity=False),
)
# NFC and NFD spellings of the same letter, case pairs, a NUL: prefixes compare code points exactly.
_EDGE_STRINGS = st.sampled_from(
    ["", "a", "A", "ab", "\u00e9", "e\u0301", "\u00e9x", "e\u0301x", "e", "\u00df", "SS", "\x00"]
)
_EDGE_SCALARS = st.one_of(_EDGE_NUMBERS, _EDGE_STRINGS, st.booleans())


@st.composite
def _edge_spec(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {}
    for op in draw(
        st.sets(st.sampled_from(["eq", "in", "lt", "le", "gt", "ge", "prefix"]), min_size=1, max_size=4)
    ):
        if op == "eq":
            spec[op] = draw(_EDGE_SCALARS)
        elif op == "in":
            spec[op] = draw(st.lists(_EDGE_SCALARS, min_size=1, max_size=4))
        elif op == "prefix":
            spec[op] = draw(_EDGE_STRINGS)
        else:
            spec[op] = draw(_EDGE_NUMBERS)
    return spec


_EDGE_PATTERNS = [
    "tool:*", "tool:search.*", "tool:search", "tool:search.x", "tool:search.x.y", "tool:search.x.*",
    "tool:searchx", "model:*", "model:llama.*", "model:llama", "gpu:*", "gpu:h100",
]  # fmt: skip
_EDGE_RESOURCES = [
    "tool:search", "tool:search.x", "tool:search.x.y", "tool:searchx", "tool:search.z",
    "model:llama", "model:llama.3", "gpu:h100", "gpu:a100",
]  # fmt: skip


@st.composite
def _edge_capability(draw: st.DrawFn) -> Capability:
    return Capability.of(
        draw(st.sampled_from(_EDGE_PATTERNS)),
        draw(st.sampled_from(["invoke", "*", "generate"])),
        draw(st.dictionaries(st.sampled_from(["a", "b", "a.b"]), _edge_spec(), max_size=2)),
    )


@st.composite
def _edge_call(draw: st.DrawFn) -> Call:
    return Call(
        draw(st.sampled_from(_EDGE_RESOURCES)),
        draw(st.sampled_from(["invoke", "generate", "read"])),
        draw(st.dictionaries(st.sampled_from(["a", "b", "a.b"]), _EDGE_SCALARS, max_size=3)),
    )


@settings(max_examples=200, deadline=None)
@given(parent=_edge_capability(), child=_edge_capability(), calls=st.lists(_edge_call(), max_size=6))
def test_no_attenuating_child_covers_a_call_its_parent_refuses(
    parent: Capability, child: Capability, calls: list[Call]
) -> None:
    """Integers beyond 2**53, negative zero, subnormals, NFC/NFD and case in prefixes, wildcards
    one and two segments deep: a child that attenuates never covers more (no scope creep), and
    when it does not attenuate the witness is a real counterexample."""
    attenuated = attenuates(parent, child)
    for call in calls:
        if attenuated and covers(child, call):
            assert covers(parent, call), (parent, child, call)
    found = witness(parent, child)
    if found is not None:
        assert not attenuated and covers(child, found) and not covers(parent, found)
    elif not attenuated:  # only a child that no number can satisfy (see ``witness``)
        assert any(c.one_of is None and c.eq is None and c.prefix is None for _, c in child.constraints)


@settings(max_examples=200, deadline=None)
@given(spec=_edge_spec(), values=st.lists(_EDGE_SCALARS, min_size=1, max_size=6))
def test_normal_forms_the_index_and_the_token_fast_path_agree_with_the_operators(
    spec: dict[str, Any], values: list[object]
) -> None:
    """One constraint read four ways: operator by operator (exact, no float rounding), through its
    normal form, through the policy index's compiled check, and rebuilt from its token form."""
    constraint = Constraint.of(spec)
    capability = Capability.of("tool:x", "invoke", {"a": spec})
    compiled = _compile(RuleRef("r", 0, capability))
    token_form = capability_from_canonical(capability.to_dict())
    for value in values:
        expected = _direct(spec, value)
        assert constraint.allows(value) == expected, (spec, value)
        assert _passes(compiled, {"a": value}) == expected, (spec, value)
        if token_form is not None:
            assert covers(token_form, Call("tool:x", "invoke", {"a": value})) == expected


def _direct(spec: dict[str, Any], value: object) -> bool:
    number = type(value) in (int, float)
    ops = {"lt": operator.lt, "le": operator.le, "gt": operator.gt, "ge": operator.ge}
    for op, bound in spec.items():
        if op == "eq":
            ok = _same(value, bound)
        elif op == "in":
            ok = any(_same(value, v) for v in bound)
        elif op == "prefix":
            ok = isinstance(value, str) and value.startswith(bound)
        else:
            ok = number and ops[op](value, bound)
        if not ok:
            return False
    return True


def test_through_the_gate_an_approver_of_only_one_of_two_gates_cannot_release_the_call(
    sqlite_store: SQLiteStore,
) -> None:
    """End to end: the Gate takes the combined requirement; finance's signed yes does not release
    a large refund that the every-payment gate also guards; the auditor, named by both, does."""
    keys = {n: SigningKey.generate() for n in ("root", "agent", "finance", "compliance", "auditor")}
    text = (
        _TWO_GATES.replace(f"did: {_DID}", f'did: "{keys["agent"].did}"')
        .replace(_APPROVER_DIDS[0], keys["finance"].did)
        .replace(_APPROVER_DIDS[1], keys["compliance"].did)
        .replace(_APPROVER_DIDS[2], keys["auditor"].did)
        .replace("version: 1\n", f'version: 1\ntrust_anchors: {{root: {{did: "{keys["root"].did}"}}}}\n', 1)
    )
    gate = Gate(parse_policy(text), sqlite_store)
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="r")
        call = Call.tool("payments.refund", {"amount": 5000})
        payload = gate.authorize(agent, call, call_id="c1").approval_payload()
        for outsider in ("finance", "compliance"):
            vote = Approval.sign(payload, keys[outsider])
            assert not gate.authorize(agent, call, call_id="c1", approval=vote).allowed
        vote = Approval.sign(payload, keys["auditor"])
        assert gate.authorize(agent, call, call_id="c1", approval=vote).allowed
    finally:
        gate.close()


# --- lint -------------------------------------------------------------------------------------------

_LINT_BASE = """
version: 1
tools:
  t: {args: {n: {type: integer}, x: {type: number}}}
roles:
  r: {ttl_s: 60, capabilities: [{resource: "tool:t", constraints: CONSTRAINTS}]}
"""


@pytest.mark.parametrize(
    ("constraints", "dead"),
    [
        ("{n: {gt: 1, lt: 2}}", True),  # reals lie between, no integer does
        ("{n: {ge: 1.5, le: 1.7}}", True),
        ("{n: {in: [1.5, 3], lt: 2}}", True),  # the set keeps only 1.5
        ("{n: {gt: 9007199254740992, lt: 9007199254740993}}", True),  # exact beyond 2**53
        ("{n: {gt: 1, le: 2}}", False),
        ("{n: {in: [1.5, 3], gt: 2}}", False),
        ("{n: {gt: 9007199254740992, lt: 9007199254740994}}", False),
        ("{x: {gt: 1, lt: 2}}", False),  # a number may be 1.5
    ],
)
def test_lint_finds_an_integer_constraint_no_whole_number_satisfies(constraints: str, dead: bool) -> None:
    """docs/lint.md: constraint_type_mismatch is a constraint that admits no value of the declared
    type. For an integer argument only the values listed were checked, never the bounds, so a rule
    ``{gt: 1, lt: 2}`` on an integer loaded lint-clean and never matched."""
    policy = parse_policy(_LINT_BASE.replace("CONSTRAINTS", constraints))
    codes = [f.code for f in lint(policy)]
    assert ("constraint_type_mismatch" in codes) is dead, codes


def test_lint_flags_an_agent_that_holds_a_trust_anchors_key() -> None:
    """An agent principal declared with the trust anchor's did:key can sign root grants for
    itself: all authority, none of it delegated. principal_without_key compared principals with
    each other only, so this loaded lint-clean. A human operator holding the anchor key is left
    alone (that is what an anchor is for)."""
    text = f"""
version: 1
trust_anchors: {{root: {{did: "{_DID}"}}}}
principals:
  bot: {{kind: agent, did: "{_DID}", roles: [r]}}
tools:
  t: {{args: {{}}}}
roles:
  r: {{kind: agent, ttl_s: 60, capabilities: [{{resource: "tool:t"}}]}}
"""
    found = [f for f in lint(parse_policy(text)) if f.code == "principal_without_key"]
    assert len(found) == 1 and "trust anchor root" in found[0].message and found[0].line == 5
    human = [f.code for f in lint(parse_policy(text.replace("bot: {kind: agent", "bot: {kind: human")))]
    assert "principal_without_key" not in human
