"""Structure-aware fuzzing (Hypothesis) of every parser that takes untrusted
text or bytes. Property: a parse succeeds or raises a typed agentgate error (an ``AgentGateError``)
naming what and where; never another exception, never a hang. Plus the round trips and the
algebra's consistency, over values the earlier property tests do not draw (integers past 2**53
and 2**63, doubles at their extremes, -0.0, subnormals, text beyond ASCII, every resource kind
and wildcard).

Defects found (each has a test below):

- ``agentgate/_yaml.py`` (fixed): a policy (or inventory) integer written in hex, octal or binary
  with more than 4,300 decimal digits' worth of value (``0x`` and 3,600 hex digits, 14 KB) loaded
  as a Python int that nothing can print: ``parse_policy`` then raised a bare ``ValueError``
  (``Exceeds the limit (4300 digits)``) from the message of ``version`` or of a constraint value.
  Such a number is now refused where it is written, like a decimal one. And ``0x_`` or
  ``!!float abc`` said "number of 3 characters (expected a number of sensible size)"; now "not a
  number: '0x_'".
- ``agentgate/capabilities/_values.py`` (fixed): ``Constraint.of`` with an integer of more than 4,300
  digits (a Python caller) raised a bare ``ValueError`` while wording its own ``CapabilityError``.
- ``agentgate/capabilities/_values.py`` (fixed): ``Constraint.of`` removed repeated ``in`` values by
  comparing every value with every other: a 1,000-value set holding a boolean (which the token
  fast path leaves to ``Constraint.of``) took 0.5 s, and a grant chain is parsed, every link's
  capabilities built, before any signature is checked: one unsigned 32 KiB header cost seconds of
  CPU. Linear now, with the same result (checked against the quadratic reference).
- ``agentgate/policy/_schema.py`` (fixed): a constraint operator written as null (``ge:`` with
  its value left out, a template variable never set) was dropped silently, so ``{ge: , le: 500}``
  loaded as ``le: 500``: the rule allowed more than its text, and an approval gate's ``when``
  applied to fewer calls. Refused now at the operator's line. (``agentgate/policy/_load.py``: a
  validator's message no longer says "Value error, ..." twice.)
- ``agentgate/audit/entry.py`` (fixed by the lead): ``AuditEntry.from_bytes`` let the bare
  ``ValueError`` of an integer of more than 4,300 digits escape (it caught ``JSONDecodeError``
  only), so a tampered row made ``AuditLog.entry``/``entries`` (``audit show``, ``audit
  explain``, and ``audit report``, whose ``skip_malformed`` skips only ``TamperDetected``) fail
  with a traceback instead of naming the tampered entry.

What holds (fuzzed here, found sound): the one-line capability grammar (typed errors, and
``parse(format(c)) == c``); ``attenuates``/``covers``/``witness``/``intersects`` agree over the
whole algebra with wide values; grant chains mutated as text, as bytes and as re-encoded,
re-signed payloads parse or raise ``TokenFormatError``, and the grant and invocation fast paths
accept exactly what the reference steps accept, equal; ``did_public_key`` and
``public_key_from_did`` agree; ``b64url_decode_parts`` and ``b64url_decode`` agree; issued
capabilities come back from the token equivalent; policy YAML mutated as data (types, keys,
nesting, huge numbers, NaN, unicode) and as text (anchors, aliases, tags, merge keys, BOM,
control characters, lone surrogates) loads or raises a ``PolicyError`` naming the file; key files
mutated load or raise ``KeyFileError`` naming the file; ``--args`` JSON, durations and approval
resume values are typed. There is no policy dump, so no load/dump/load round trip to check.
"""

from __future__ import annotations

import enum
import json
import os
from pathlib import Path

import orjson
import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import agentgate.capabilities._constraints as constraints_module
import agentgate.capabilities._normal_forms as normal_forms_module
import agentgate.capabilities._values as values_module
from agentgate._yaml import load_yaml
from agentgate.audit.entry import AuditEntry
from agentgate.authority import Budget, Invocation, delegate, issue, verify_chain
from agentgate.authority._encoding import (
    b64url_decode,
    b64url_decode_parts,
    b64url_encode,
    canonical_json,
    did_public_key,
)
from agentgate.authority._grant import GRANT_CONTEXT
from agentgate.authority._invocation import _decode_common
from agentgate.authority._parsing import (
    _grant_from_canonical,
    _parse_grant_reference,
    parse_chain,
    parse_grant,
)
from agentgate.capabilities import (
    Call,
    Capability,
    Constraint,
    attenuates,
    covers,
    format_capability,
    intersects,
    parse_capability,
    witness,
)
from agentgate.capabilities._values import _plain, _same
from agentgate.cli._common import json_object
from agentgate.cli.grant import parse_duration
from agentgate.errors import (
    AgentGateError,
    CapabilityError,
    InputError,
    KeyFileError,
    PolicyError,
    TamperDetected,
    TokenFormatError,
)
from agentgate.gate import Approval
from agentgate.keys import SigningKey, load_public_key, load_signing_key, public_key_from_did, save_key
from agentgate.policy import parse_policy
from agentgate.policy._schema import MAX_TTL_S as MAX_DURATION

FUZZ = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)
SHORT = settings(FUZZ, max_examples=60)
MEDIUM = settings(FUZZ, max_examples=100)
POLICIES = Path(__file__).resolve().parent.parent / "policies"
NOW = 1_700_000_000
ROOT = SigningKey(b"\x31" * 32)
AGENT = SigningKey(b"\x32" * 32)
SUB = SigningKey(b"\x33" * 32)


# --- the capability grammar and the algebra ---------------------------------------------------------

FRAGMENTS = st.sampled_from(
    [
        "tool:", "model:", "gpu:", "pay", ".refund", ".*", "*", "#", "#read", "?", "&", "|", "=",
        "==", "<", "<=", ">", ">=", "^=", "a", "amount", "x.y", '"', '""', "%", "%25", "%FF",
        "%C3%A9", "%ZZ", "1", "-1", "0.5", "1e400", "1e-400", "-0", "00", "1.", ".5", "true",
        "false", "é", "\u200b", "\ud800", " ", "\n", "9" * 30, "Qwen/Qwen3", ":", "/",
    ]
)  # fmt: skip
CAPABILITY_TEXT = st.lists(FRAGMENTS, max_size=14).map("".join) | st.text(max_size=40)


@FUZZ
@given(CAPABILITY_TEXT)
def test_the_one_line_grammar_parses_or_refuses_and_what_it_prints_reads_back(text: str) -> None:
    try:
        cap = parse_capability(text)
    except CapabilityError as exc:
        assert str(exc)
        return
    assert parse_capability(format_capability(cap)) == cap
    assert Capability.from_dict(cap.to_dict()) == cap


NUMBERS = st.one_of(
    st.integers(-(2**64), 2**64),
    st.sampled_from(
        [2**53, 2**53 + 1, 2**63 - 1, -(2**63) + 1, 2**60, 2**60 + 1, 0, -0.0, 5e-324,
         1.7976931348623157e308, 4.999999999999999, 5, 5.0, 0.1, 0.30000000000000004]
    ),
    st.floats(allow_nan=False, allow_infinity=False),
)  # fmt: skip
STRINGS = st.sampled_from(
    ["", "a", "ab", "abc", "b", "é", "\x00", "\x01", "zz-witness", "0", "a\x01"]
) | st.text(max_size=4)
VALUES = st.one_of(NUMBERS, STRINGS, st.booleans())
RESOURCES = st.sampled_from(
    ["tool:*", "tool:a.*", "tool:a.b", "tool:a.b.*", "tool:a.bc", "tool:ab", "model:*", "model:a.*",
     "model:a/b", "gpu:*", "gpu:h100"]
)  # fmt: skip
CALL_RESOURCES = st.sampled_from(
    [
        "tool:a.b",
        "tool:a.b.c",
        "tool:a.bc",
        "tool:ab",
        "tool:a",
        "model:a/b",
        "model:a.x",
        "gpu:h100",
        "tool:zz",
    ]
)


@st.composite
def constraint_specs(draw: st.DrawFn) -> dict[str, object]:
    ops = draw(
        st.sets(st.sampled_from(["eq", "in", "lt", "le", "gt", "ge", "prefix"]), min_size=1, max_size=4)
    )
    spec: dict[str, object] = {}
    for op in ops:
        if op == "eq":
            spec[op] = draw(VALUES)
        elif op == "in":
            spec[op] = draw(st.lists(VALUES, min_size=1, max_size=5))
        elif op == "prefix":
            spec[op] = draw(STRINGS)
        else:
            spec[op] = draw(NUMBERS)
    return spec


@st.composite
def capabilities(draw: st.DrawFn) -> Capability:
    fields = draw(st.dictionaries(st.sampled_from(["a", "b"]), constraint_specs(), max_size=2))
    action = draw(st.sampled_from(["invoke", "*", "read", "generate"]))
    try:
        return Capability.of(draw(RESOURCES), action, fields)
    except CapabilityError:
        assume(False)
        raise  # pragma: no cover


@st.composite
def calls(draw: st.DrawFn) -> Call:
    action = draw(st.sampled_from(["invoke", "read", "generate", "lease"]))
    return Call(
        draw(CALL_RESOURCES), action, draw(st.dictionaries(st.sampled_from(["a", "b"]), VALUES, max_size=2))
    )


@MEDIUM
@given(capabilities(), capabilities(), calls())
def test_a_child_that_attenuates_never_covers_a_call_its_parent_does_not(
    parent: Capability, child: Capability, call: Call
) -> None:
    if attenuates(parent, child) and covers(child, call):
        assert covers(parent, call)


@MEDIUM
@given(capabilities(), capabilities())
def test_witness_agrees_with_attenuates_over_wide_values(parent: Capability, child: Capability) -> None:
    found = witness(parent, child)
    if attenuates(parent, child):
        assert found is None
    elif found is not None:  # None: wider only by reals no integer or double can be (documented)
        assert covers(child, found) and not covers(parent, found)
    assert parse_capability(format_capability(child)) == child


@FUZZ
@given(constraint_specs(), constraint_specs(), VALUES)
def test_intersects_is_true_whenever_a_value_satisfies_both(a: dict, b: dict, value: object) -> None:
    try:
        first, second = Constraint.of(a), Constraint.of(b)
    except CapabilityError:
        return
    if first.allows(value) and second.allows(value):
        assert intersects(first, second)


class _Small(enum.IntEnum):
    ONE = 1


class _Text(str):
    pass


def _distinct_reference(values: list[object]) -> list[object]:
    """What ``Constraint.of`` keeps: each value as its plain built-in value (``_plain``: an
    ``IntEnum`` member is the integer it holds), unless ``_same`` as one kept before it."""
    kept: list[object] = []
    for value in map(_plain, values):
        if not any(_same(value, seen) for seen in kept):
            kept.append(value)
    return kept


MIXED = st.one_of(
    st.integers(-3, 3),
    st.sampled_from([1.0, -0.0, 0.0, 2.5, True, False, "1", "a", "", _Small.ONE, _Text("a"), _Text("1")]),
)


@FUZZ
@given(st.lists(MIXED, min_size=2, max_size=8))
def test_a_set_keeps_the_same_values_in_the_same_order_as_the_pairwise_comparison(
    values: list[object],
) -> None:
    kept = _distinct_reference(values)
    expected: dict[str, object] = {"eq": kept[0]} if len(kept) == 1 else {"in": kept}
    got = Constraint.of({"in": values}).to_dict()
    assert got == expected
    assert [type(v) for v in got.get("in", [got.get("eq")])] == [type(v) for v in kept]


def test_a_token_of_large_sets_with_a_boolean_is_parsed_in_linear_comparisons(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found: a boolean in a 1,000-value set sends the set to ``Constraint.of`` (the fast path
    takes strings and integers only), which compared every value with every other: 500,000
    comparisons per set, 0.5 s, before any signature of the chain is checked."""
    sets = [Capability.of(f"tool:t{i}", None, {"a": {"in": [True, *range(990)]}}) for i in range(2)]
    token = issue(ROOT, AGENT.public, sets, ttl=3600, now=NOW).token
    count = 0
    real = values_module._same

    def counted(a: object, b: object) -> bool:
        nonlocal count
        count += 1
        return real(a, b)

    # Every module that reads ``_same``: the set's values (_distinct), a set's membership, a
    # constraint's normal form.
    for module in (values_module, normal_forms_module, constraints_module):
        monkeypatch.setattr(module, "_same", counted)
    chain = parse_chain(token)
    assert [len(c.constraint_map["a"].one_of or ()) for c in chain.tip.capabilities] == [991, 991]
    assert count < 10_000  # the pairwise way: about 2 x 490,000


def test_an_integer_too_long_to_print_is_a_capability_error() -> None:
    """Found: the error's own message printed the integer, which raised a bare ValueError."""
    for spec in ({"le": 10**5000}, {"in": [1, -(10**5000)]}, {"eq": 2**20000}):
        with pytest.raises(CapabilityError, match="out of range"):
            Capability.of("tool:pay", None, {"amount": spec})
    with pytest.raises(CapabilityError, match=r"integer 9223372036854775808 is out of range"):
        Capability.of("tool:pay", None, {"amount": {"le": 2**63}})


@SHORT
@given(
    st.lists(capabilities(), min_size=1, max_size=3),
    st.lists(capabilities(), min_size=1, max_size=2),
    calls(),
)
def test_issued_capabilities_come_back_from_the_token_equivalent(
    held: list[Capability], handed: list[Capability], call: Call
) -> None:
    try:
        chain = issue(ROOT, AGENT.public, held, ttl=3600, now=NOW)
    except AgentGateError:  # e.g. a fraction, which tokens cannot carry
        return
    back = parse_chain(chain.token).tip.capabilities
    for mine, theirs in zip(held, back, strict=True):
        assert attenuates(mine, theirs) and attenuates(theirs, mine)
        assert covers(mine, call) == covers(theirs, call)
    try:
        child = delegate(chain, AGENT, SUB.public, handed, ttl=60, now=NOW)
    except AgentGateError:
        return
    verify_chain(child.token, ROOT.public, now=NOW + 1)
    for cap in child.tip.capabilities:
        assert any(attenuates(parent, cap) for parent in back)


# --- grant and invocation tokens -----------------------------------------------------------------------

CHAIN = delegate(
    issue(
        ROOT,
        AGENT.public,
        ["tool:pay.refund?amount<=500&currency=EUR|USD", "tool:search.*"],
        ttl=3600,
        budget=Budget(1000),
        now=NOW,
    ),
    AGENT,
    SUB.public,
    ["tool:pay.refund?amount<=100&currency=EUR"],
    ttl=600,
    now=NOW,
)
TOKEN_PARTS = CHAIN.token.split(".")
ROOT_PAYLOAD = json.loads(b64url_decode(TOKEN_PARTS[1], "root"))
JSON_VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.sampled_from([2**63 - 1, 2**63, -1, 0, 2**40, 2**40 - 1, 16, 15]),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=5),
        st.sampled_from(["did:key:z6Mk", ROOT.did, "tool:*", "invoke", "a" * 64, "0" * 32]),
    ),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.text(max_size=4)
            | st.sampled_from(["resource", "action", "constraints", "amount", "unit", "le", "in"]),
            inner,
            max_size=3,
        )
    ),
    max_leaves=8,
)
GRANT_FIELDS = [
    "v",
    "iss",
    "aud",
    "caps",
    "budget",
    "nbf",
    "exp",
    "depth",
    "nonce",
    "purpose",
    "parent",
    "ext",
    "crit",
]


def _parse_and_verify(token: str) -> None:
    """Parse, then verify: each raises only a typed error."""
    try:
        chain = parse_chain(token)
    except TokenFormatError as exc:
        assert str(exc)
        return
    try:
        verify_chain(chain, ROOT.public, now=NOW + 10)
    except AgentGateError as exc:
        assert str(exc)


@FUZZ
@given(st.data())
def test_a_chain_mutated_as_text_parses_or_is_a_token_format_error(data: st.DataObject) -> None:
    token = CHAIN.token
    for _ in range(data.draw(st.integers(1, 4))):
        if not token:
            break
        at = data.draw(st.integers(0, len(token) - 1))
        how = data.draw(st.sampled_from(["replace", "truncate", "duplicate", "delete", "insert", "swap"]))
        if how == "replace":
            token = token[:at] + data.draw(st.sampled_from(list("Aa0-_.=+/ \né\x00"))) + token[at + 1 :]
        elif how == "truncate":
            token = token[:at]
        elif how == "duplicate":
            end = data.draw(st.integers(at, len(token)))
            token = token[:end] + token[at:end] + token[end:]
        elif how == "delete":
            token = token[:at] + token[at + 1 :]
        elif how == "insert":
            token = token[:at] + data.draw(st.text(max_size=3)) + token[at:]
        else:
            parts = token.split(".")
            if len(parts) > 2:
                i, j = (data.draw(st.integers(1, len(parts) - 1)) for _ in range(2))
                parts[i], parts[j] = parts[j], parts[i]
                token = ".".join(parts)
    _parse_and_verify(token)


def _reencode(value: dict, how: int) -> bytes:
    if how == 0:
        return canonical_json(value)
    if how == 1:
        return json.dumps(value).encode()
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


@FUZZ
@given(st.data())
def test_a_root_payload_changed_and_re_signed_parses_the_same_on_both_paths(data: st.DataObject) -> None:
    """The fields of a real root grant changed (types, ranges, nesting, extra and missing
    fields), re-encoded (canonically or not) and re-signed by the root: the fast path accepts
    only what the reference steps accept, as an equal grant; the chain parses or is refused."""
    payload_value = json.loads(json.dumps(ROOT_PAYLOAD))
    for _ in range(data.draw(st.integers(1, 3))):
        name = data.draw(st.sampled_from(GRANT_FIELDS))
        how = data.draw(st.sampled_from(["set", "delete", "capability"]))
        caps = payload_value.get("caps")
        if how == "set":
            payload_value[name] = data.draw(JSON_VALUES)
        elif how == "delete":
            payload_value.pop(name, None)
        elif isinstance(caps, list) and caps and isinstance(caps[0], dict):
            cap = caps[0]
            part = data.draw(st.sampled_from(["resource", "action", "constraints"]))
            if part == "constraints" and isinstance(cap.get("constraints"), dict) and cap["constraints"]:
                cap["constraints"][next(iter(cap["constraints"]))] = data.draw(JSON_VALUES)
            else:
                cap[part] = data.draw(JSON_VALUES)
    try:
        payload = _reencode(payload_value, data.draw(st.integers(0, 2)))
    except (TokenFormatError, TypeError, ValueError):  # not JSON at all: nothing to send
        return
    signature = ROOT.sign(GRANT_CONTEXT + payload)
    try:
        parsed = parse_grant(payload, signature)
    except TokenFormatError:
        parsed = None
    fast = _grant_from_canonical(payload, signature)
    if fast is not None:
        assert parsed == fast == _parse_grant_reference(payload, signature, "grant")
    _parse_and_verify(".".join(["ag1", b64url_encode(payload), b64url_encode(signature), *TOKEN_PARTS[3:]]))


INVOCATION = Invocation.sign(
    AGENT, CHAIN.token.rsplit(".", 2)[0], Call.tool("pay.refund", {"amount": 5}), now=NOW
)
INVOCATION_TEXT = INVOCATION.encode()
INVOCATION_FIELDS = json.loads(b64url_decode(INVOCATION_TEXT.split(".")[1], "invocation"))


@FUZZ
@given(st.data())
def test_an_invocation_changed_decodes_the_same_on_both_paths_or_is_refused(data: st.DataObject) -> None:
    fields = dict(INVOCATION_FIELDS)
    for _ in range(data.draw(st.integers(1, 3))):
        name = data.draw(st.sampled_from([*INVOCATION_FIELDS, "x"]))
        if data.draw(st.booleans()):
            fields[name] = data.draw(JSON_VALUES)
        else:
            fields.pop(name, None)
    try:
        payload = _reencode(fields, data.draw(st.integers(0, 2)))
    except (TokenFormatError, TypeError, ValueError):
        return
    text = f"agi1.{b64url_encode(payload)}.{INVOCATION_TEXT.split('.')[2]}"
    if data.draw(st.booleans()):
        at = data.draw(st.integers(0, len(text) - 1))
        text = text[:at] + data.draw(st.text(max_size=2)) + text[at + data.draw(st.integers(0, 3)) :]
    token = INVOCATION.chain_token
    try:
        decoded = Invocation.decode(text, token, INVOCATION.call)
    except TokenFormatError:
        decoded = None
    fast = _decode_common(text, token, INVOCATION.call)
    if fast is not None:
        assert decoded == fast == Invocation._decode_reference(text, token, INVOCATION.call)
    if decoded is not None:
        assert decoded.id  # its payload can be computed (and hashed) again


@FUZZ
@given(st.data())
def test_the_two_did_key_decoders_agree(data: st.DataObject) -> None:
    did = data.draw(st.sampled_from([ROOT.did, AGENT.did, SUB.did]))
    for _ in range(data.draw(st.integers(0, 3))):
        at = data.draw(st.integers(0, len(did)))
        did = (
            did[:at]
            + data.draw(st.sampled_from([*"1z2AaLlOo0 \n", "", "é"]))
            + did[at + data.draw(st.integers(0, 2)) :]
        )
    try:
        fast = did_public_key(did)
    except TokenFormatError:
        fast = None
    try:
        reference = public_key_from_did(did)
    except KeyFileError:
        reference = None
    assert fast == reference


BASE64_PIECES = st.sampled_from(
    [
        *"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_",
        "=",
        "+",
        "/",
        " ",
        "\n",
        "é",
        "A=",
        "\x00",
    ]
)


@FUZZ
@given(
    st.lists(
        st.lists(BASE64_PIECES, max_size=12).map("".join) | st.binary(max_size=10).map(b64url_encode),
        min_size=1,
        max_size=4,
    )
)
def test_decoding_all_parts_at_once_agrees_with_decoding_each(parts: list[str]) -> None:
    together = b64url_decode_parts(".".join(parts))
    each: list[bytes] | None = []
    for part in parts:
        try:
            each.append(b64url_decode(part, "part"))  # type: ignore[union-attr]
        except TokenFormatError:
            each = None
            break
    assert together == each
    if each is not None:
        assert [b64url_encode(b) for b in each] == parts  # one spelling per byte string


# --- policy YAML ---------------------------------------------------------------------------------------

POLICY_FILES = ["gpu_platform.yaml", "research_team.yaml", "support.yaml"]
POLICY_DATA = {name: yaml.safe_load((POLICIES / name).read_text()) for name in POLICY_FILES}
ODD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from(
        [2**63, 2**64, -(2**63), 10**30, 0, -1, 1.5, float("nan"), float("inf"), -float("inf"), 1e308, 5e-324,
         "", "0o17", "09", "1e3", "1:30", "yes", "no", "~", "tool:*", "tool:Run_Shell", "Tool:x", "tool:a.*",
         "model:*", "gpu:*", "\u200b", "did:key:z6Mk", "a" * 200, [], {}, [[]], {"eq": None},
         {"le": None, "eq": 5}, {"in": []}, {"in": [None]}, {"prefix": 5}, {"ne": 1}, {"eq": [1]}, {"in": 5}]
    ),
    st.text(max_size=6),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)  # fmt: skip


def _paths(value: object, path: tuple = ()) -> list[tuple]:
    out = [path]
    if isinstance(value, dict):
        for key, inner in value.items():
            out += _paths(inner, (*path, key))
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            out += _paths(inner, (*path, i))
    return out


def _load_or_policy_error(text: str | bytes) -> None:
    try:
        policy = parse_policy(text, source="fuzz.yaml", base_dir=POLICIES)
    except PolicyError as exc:
        assert str(exc).startswith("fuzz.yaml"), str(exc)
        return
    for role in policy.document.roles:
        policy.effective_rules(role)


@SHORT
@given(st.data())
def test_a_policy_changed_as_data_loads_or_is_a_located_policy_error(data: st.DataObject) -> None:
    document = json.loads(json.dumps(POLICY_DATA[data.draw(st.sampled_from(POLICY_FILES))]))
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(_paths(document)))
        if not path:
            continue
        parent = document
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        how = data.draw(st.sampled_from(["set", "delete", "rename", "wrap"]))
        if how == "set":
            parent[key] = data.draw(ODD_VALUES)
        elif how == "delete":
            del parent[key]
        elif how == "rename" and isinstance(parent, dict):
            new = data.draw(
                st.text(max_size=5) | st.sampled_from(["in_", "In", "EQ", "capability", "ttl", "when"])
            )
            parent[new] = parent.pop(key)
        elif how == "wrap":
            parent[key] = [parent[key]] if data.draw(st.booleans()) else {"x": parent[key]}
    flow = data.draw(st.sampled_from([None, True, False]))
    _load_or_policy_error(
        yaml.safe_dump(document, allow_unicode=data.draw(st.booleans()), default_flow_style=flow)
    )


YAML_TOKENS = st.sampled_from(
    ["&a ", "*a", "!!python/object:os.system ", "!!str ", "!!int ", "!!float ", "!!binary ", "!!set ", "<<: ",
     "? ", "- ", ": ", "{", "}", "[", "]", ",", "'", '"', "\t", "\n", "\r", "\x00", "\x85", "\u2028", "\ufeff",
     ".nan", ".inf", "1e999", "0x_", "0b", "._", "1_0", "09", "0o8", "---\n", "...\n", "%YAML 1.1\n", "#", "|",
     ">", "\\", "é", "\ud800", "9" * 5000, "0x" + "f" * 3600, "0o" + "7" * 4800, "@", "`"]
)  # fmt: skip


@SHORT
@given(st.data())
def test_a_policy_changed_as_text_loads_or_is_a_located_policy_error(data: st.DataObject) -> None:
    text = (POLICIES / data.draw(st.sampled_from(POLICY_FILES))).read_text()
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(text)))
        text = (
            text[:at]
            + data.draw(YAML_TOKENS | st.text(max_size=3))
            + text[at + data.draw(st.integers(0, 3)) :]
        )
    _load_or_policy_error(text)
    _load_or_policy_error(text.encode("utf-8", "surrogatepass"))  # bytes that are not UTF-8 too


POLICY_WITH = """version: 1
tools:
  pay: {{}}
principals:
  alice: {{kind: human}}
roles:
  r:
    capabilities:
      - resource: tool:pay
        constraints:
          amount: {constraint}
approvals:
  big:
    resource: tool:pay
    approvers: [alice]
    when:
      amount: {when}
"""


@pytest.mark.parametrize(
    "number", ["0x" + "f" * 3600, "-0x" + "F" * 4000, "0b" + "1" * 15000, "0o" + "7" * 4800, "9" * 5000]
)
@pytest.mark.parametrize("where", ["version", "constraint", "when"])
def test_an_integer_of_more_than_4300_digits_in_any_base_is_a_policy_error(number: str, where: str) -> None:
    """Found: hex, octal and binary integers were built whatever their size, and the first
    message that quoted one (``unsupported policy version``, ``integer ... is out of range``)
    raised a bare ValueError instead of a PolicyError."""
    text = POLICY_WITH.format(constraint="{le: 500}", when="{gt: 100}")
    if where == "version":
        text = text.replace("version: 1", f"version: {number}")
    else:
        text = text.replace("{le: 500}" if where == "constraint" else "{gt: 100}", f"{{le: {number}}}")
    with pytest.raises(PolicyError, match=rf"number of {len(number)} characters") as caught:
        parse_policy(text, source="p.yaml")
    assert caught.value.file == "p.yaml" and caught.value.line is not None


def test_an_integer_of_4300_digits_in_any_base_still_loads() -> None:
    big = 10**4300 - 1
    data, _ = load_yaml(f"d: {big}\nh: {hex(big)}\no: 0o{big:o}\nb: {bin(-big)}\n", source="p.yaml")
    assert data == {"d": big, "h": big, "o": big, "b": -big}


@pytest.mark.parametrize("text", ["a: 0x_", "a: 0b_", "a: !!float abc", "a: !!int 0x_"])
def test_a_number_with_no_digits_is_called_that(text: str) -> None:
    with pytest.raises(PolicyError, match="not a number") as caught:
        load_yaml(text, source="p.yaml")
    assert (caught.value.line, caught.value.column) == (1, 4)


@pytest.mark.parametrize("operator", ["eq", "in", "lt", "le", "gt", "ge", "prefix"])
@pytest.mark.parametrize("written", ["null", "~", ""])
@pytest.mark.parametrize("section", ["constraint", "when"])
def test_an_operator_written_without_a_value_is_refused_not_dropped(
    operator: str, written: str, section: str
) -> None:
    """Found: ``{ge: , le: 500}`` loaded as ``le: 500`` (the null operator was dropped, so the
    rule allowed amounts below the bound its text sets; in ``when``, the gate asked for approval
    of fewer calls). Refused now, at the operator."""
    other = "le: 500" if operator != "le" else "ge: 1"
    spec = f"{{{operator}: {written}, {other}}}"
    text = POLICY_WITH.format(
        constraint=spec if section == "constraint" else "{le: 500}",
        when=spec if section == "when" else "{gt: 100}",
    )
    with pytest.raises(PolicyError, match="an operator needs a value") as caught:
        parse_policy(text, source="p.yaml")
    error = caught.value
    assert error.line == (11 if section == "constraint" else 17) and error.column is not None
    assert f"amount.{operator}" in error.message and "Value error" not in str(error)


def test_the_documented_constraints_still_load() -> None:
    policy = parse_policy(
        POLICY_WITH.format(constraint="{ge: 1, le: 500}", when="{gt: 100}"), source="p.yaml"
    )
    assert format_capability(policy.rules["r"][0].capability) == "tool:pay?amount<=500&amount>=1"


# --- audit entries, key files, command-line values, approvals --------------------------------------

ENTRY = AuditEntry.build(
    index=3,
    time="2026-01-01T00:00:00.000000Z",
    kind="allow",
    principal=AGENT.did,
    args={"amount": 5, "x": [1.5, "é"]},
    reasons=["r"],
    budget_delta=7,
    ref=1,
)
ENTRY_BYTES = ENTRY.to_bytes()


@FUZZ
@given(st.data())
def test_entry_bytes_changed_parse_or_are_tamper_detected(data: st.DataObject) -> None:
    """Integers of more than 4,300 digits have their own tests below."""
    fields = json.loads(ENTRY_BYTES)
    for _ in range(data.draw(st.integers(0, 3))):
        name = data.draw(st.sampled_from([*fields, "zz"]))
        if data.draw(st.booleans()):
            fields[name] = data.draw(
                JSON_VALUES
                | st.sampled_from([10**400, 2**64, -1, "2026-01-01T00:00:00.000000Z\n", ["a"], 1e300])
            )
        else:
            fields.pop(name, None)
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=data.draw(st.booleans()))
    raw = text.encode("utf-8", "surrogatepass")
    if data.draw(st.booleans()):
        at = data.draw(st.integers(0, len(raw)))
        raw = raw[:at] + data.draw(st.binary(max_size=3)) + raw[at + data.draw(st.integers(0, 2)) :]
    try:
        entry = AuditEntry.from_bytes(raw)
    except TamperDetected:
        return
    assert entry.to_bytes() == raw


HUGE_ENTRY = ENTRY_BYTES.replace(b'"budget_delta":7', b'"budget_delta":' + b"7" * 5000)


def test_entry_bytes_holding_an_integer_of_5000_digits_are_tamper_detected() -> None:
    with pytest.raises(TamperDetected):
        AuditEntry.from_bytes(HUGE_ENTRY)


def test_a_tampered_entry_holding_a_huge_integer_is_named_not_a_traceback(tmp_path: Path) -> None:
    from test_audit_tamper import _attack, _fill, _row

    from agentgate.store import SQLiteStore

    store = SQLiteStore(tmp_path / "audit.db")
    log = _fill(store, 4)
    data, _leaf = _row(store, 2)
    assert b'"budget_delta":2' in data
    _attack(
        store,
        (
            "UPDATE audit_log SET entry = ? WHERE idx = 2",
            (data.replace(b'"budget_delta":2', b'"budget_delta":' + b"2" * 5000),),
        ),
    )
    assert log.verify().first_bad_index == 2  # verify names it
    shown = list(log.entries(skip_malformed=True))  # what `audit report` lists: the others
    assert [entry.index for entry in shown] == [0, 1, 3]
    with pytest.raises(TamperDetected):
        log.entry(2)


def test_key_files_changed_load_or_are_a_key_file_error(tmp_path: Path) -> None:
    key = SigningKey(b"\x35" * 32)
    private_path, public_path = save_key(key, tmp_path, "k")
    private, public = private_path.read_bytes(), public_path.read_bytes()
    from cryptography.hazmat.primitives import serialization

    pem_public = (
        serialization.load_pem_private_key(private, None)
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    counter = iter(range(10**6))

    @FUZZ
    @given(st.data())
    def fuzz(data: st.DataObject) -> None:
        content = data.draw(
            st.sampled_from(
                [
                    private,
                    public,
                    pem_public,
                    public + b"\n" + public,
                    b"\xef\xbb\xbf" + public,
                    pem_public + private,
                ]
            )
        )
        for _ in range(data.draw(st.integers(0, 3))):
            at = data.draw(st.integers(0, len(content)))
            piece = data.draw(
                st.binary(max_size=3)
                | st.sampled_from([b"-----BEGIN", b"\n", b"\r", b"\x00", b"did:", b"=", b"\xff"])
            )
            content = content[:at] + piece + content[at + data.draw(st.integers(0, 4)) :]
        path = tmp_path / f"f{next(counter)}"
        path.write_bytes(content)
        os.chmod(path, 0o600)
        for loader in (load_public_key, load_signing_key):
            try:
                loader(path)
            except KeyFileError as exc:
                assert str(path) in str(exc) or "did:key" in str(exc), str(exc)
        path.unlink()

    fuzz()


@FUZZ
@given(
    st.one_of(
        st.text(max_size=30),
        JSON_VALUES.map(json.dumps),
        st.sampled_from(
            ['{"a":1e400}', '{"a":"\\ud800"}', '{"a":1,"a":2}', "[" * 5000, '{"a":' + "1" * 5000 + "}",
             '{"a":NaN}', '{"a":-Infinity}', '{"\\ud800":1}', '{"a":' + "[" * 300 + "]" * 300 + "}"]
        ),
    )
)  # fmt: skip
def test_args_on_the_command_line_are_an_object_or_an_input_error(text: str) -> None:
    try:
        value = json_object(text)
    except InputError as exc:
        assert "--args" in str(exc)
        return
    assert isinstance(value, dict)


@FUZZ
@given(
    st.text(max_size=12)
    | st.lists(
        st.sampled_from(
            ["0", "1", "999999999", "1000000000", "s", "m", "h", "d", "w", " ", "-", "+", "٣", "1_0"]
        ),
        max_size=6,
    ).map("".join)
)
def test_a_duration_is_whole_seconds_in_range_or_an_input_error(text: str) -> None:
    try:
        seconds = parse_duration(text)
    except InputError as exc:
        assert repr(text[:40]) in str(exc)  # quoted bounded since R44: at most 40 characters
        return
    assert type(seconds) is int and 0 < seconds <= MAX_DURATION


@FUZZ
@given(
    JSON_VALUES
    | st.fixed_dictionaries(
        {
            "request": JSON_VALUES,
            "call_hash": JSON_VALUES,
            "approver": JSON_VALUES | st.just(AGENT.did),
            "signature": JSON_VALUES | st.sampled_from(["00" * 64, "zz", " 00", "\ud800"]),
        }
    )
)
def test_an_approval_resume_value_is_an_approval_or_none(value: object) -> None:
    approval = Approval.parse(value)
    if approval is not None:
        assert approval.verify() is False  # nobody signed these
        assert Approval.parse(approval.to_dict()) == approval
