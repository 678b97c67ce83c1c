"""Audit entries: canonical bytes, argument digests and redaction."""

from __future__ import annotations

import hashlib
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_audit_checkpoints import ALICE, _log

from agentgate.audit.entry import (
    ENTRY_KINDS,
    AuditEntry,
    argument_digest,
    canonical_json,
    encode_entry,
    redact,
    utc_now,
)
from agentgate.errors import InputError, TamperDetected

# The worked example of docs/audit-format.md, byte for byte.
EXAMPLE = AuditEntry.build(
    index=7,
    time="2026-11-29T10:15:00.000000Z",
    kind="allow",
    principal="did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK",
    chain_hash="sha256:1111111111111111111111111111111111111111111111111111111111111111",
    policy_hash="sha256:2222222222222222222222222222222222222222222222222222222222222222",
    rule="refunds-small",
    resource="tool:payments.refund",
    args_digest=argument_digest({"amount": 120, "card": "4111-1111-1111-1111", "currency": "EUR"}),
    args=redact({"amount": 120, "card": "4111-1111-1111-1111", "currency": "EUR"}, ["amount", "currency"]),
    budget_delta=120,
    reasons=["capability covers call"],
)
EXAMPLE_BYTES = (
    b'{"approver":null,"args":{"amount":120,"currency":"EUR"},'
    b'"args_digest":"sha256:'
    + hashlib.sha256(b'{"amount":120,"card":"4111-1111-1111-1111","currency":"EUR"}').hexdigest().encode()
    + b'","budget_delta":120,'
    b'"chain_hash":"sha256:1111111111111111111111111111111111111111111111111111111111111111",'
    b'"index":7,"kind":"allow","policy_hash":"sha256:2222222222222222222222222222222222222222222222222222222222222222",'
    b'"principal":"did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK","reasons":["capability covers call"],'
    b'"ref":null,"resource":"tool:payments.refund","rule":"refunds-small","status":null,'
    b'"time":"2026-11-29T10:15:00.000000Z","v":1}'
)


def test_canonical_bytes_match_the_documented_example() -> None:
    assert EXAMPLE.to_bytes() == EXAMPLE_BYTES


def test_bytes_round_trip() -> None:
    assert AuditEntry.from_bytes(EXAMPLE_BYTES) == EXAMPLE


def test_non_canonical_bytes_are_refused() -> None:
    with pytest.raises(TamperDetected):
        AuditEntry.from_bytes(EXAMPLE_BYTES.replace(b'"index":7,', b'"index": 7,'))
    with pytest.raises(TamperDetected):
        AuditEntry.from_bytes(EXAMPLE_BYTES.replace(b'"v":1}', b'"v":1,"extra":1}'))


def test_every_field_is_covered_by_the_bytes() -> None:
    changes = {
        "kind": "deny",
        "principal": "did:key:zOther",
        "chain_hash": "x",
        "policy_hash": "y",
        "rule": "r",
        "resource": "tool:other",
        "args_digest": "sha256:00",
        "args": {},
        "approver": "did:key:zA",
        "budget_delta": 121,
        "reasons": ("other",),
        "status": "ok",
        "ref": 1,
        "time": "2026-11-29T10:15:00.000001Z",
        "index": 8,
    }
    for name, value in changes.items():
        assert EXAMPLE.model_copy(update={name: value}).to_bytes() != EXAMPLE_BYTES, name


def test_secret_fields_are_dropped_not_masked() -> None:
    clear = redact({"query": "q", "api_key": "sk-secret", "token": "t"}, ["query"])
    assert clear == {"query": "q"}
    assert b"sk-secret" not in EXAMPLE.model_copy(update={"args": clear}).to_bytes()


def test_argument_digest_ignores_key_order_but_not_values() -> None:
    assert argument_digest({"a": 1, "b": [1, 2]}) == argument_digest({"b": [1, 2], "a": 1})
    assert argument_digest({"a": 1}) != argument_digest({"a": 2})
    assert argument_digest({"a": 1}) != argument_digest({"a": "1"})


def test_values_json_cannot_hold_are_refused() -> None:
    with pytest.raises(InputError):
        argument_digest({"a": float("nan")})
    with pytest.raises(InputError):
        canonical_json({"a": object()})
    with pytest.raises(InputError):
        AuditEntry.build(index=0, time="yesterday", kind="allow", principal="did:key:z")
    with pytest.raises(InputError):
        AuditEntry.build(
            index=0, time="2026-11-29T10:15:00.000000Z", kind="allow", principal="p", budget_delta=1.5
        )


def test_documented_leaf_hash_and_signed_checkpoint() -> None:
    from agentgate.audit.merkle import leaf_hash
    from agentgate.audit.note import Checkpoint, sign_checkpoint, verifier_key
    from agentgate.keys import SigningKey

    leaf = leaf_hash(EXAMPLE_BYTES)
    assert leaf.hex() == "a96e59d92718aa59692a5e6d17262180e261ffcaf2b5bfde8fbbc609af4fc6cd"
    key = SigningKey(b"\x07" * 32)
    note = sign_checkpoint(Checkpoint("example.com/agentgate-audit", 1, leaf), key)
    assert note == (
        "example.com/agentgate-audit\n1\nqW5Z2ScYqllpKl5tFyYhgOJh/8rytb/ej7vGCa9Pxs0=\n\n"
        "\u2014 example.com/agentgate-audit Z/F7nnU5JzGNiZhp2IQOasSjh/6KeftBpnWo+2ev3EXEeaJ7Sma"
        "vJlPgzJHZtICthNPEbaP8FRkQp6OOMgmkOnP3Dg8=\n"
    )
    assert verifier_key("example.com/agentgate-audit", key.public) == (
        "example.com/agentgate-audit+67f17b9e+AepKbGPinFIKvvVQexMuxfmVR3auvr57kkIe6mkURtIs"
    )


# --- the hot path: encode_entry writes exactly what the model writes, and refuses what it refuses


def _model_bytes(fields: dict[str, object]) -> bytes | str:
    try:
        return AuditEntry.build(**fields).to_bytes()
    except InputError as exc:
        return f"refused: {exc}"


def _fast_bytes(fields: dict[str, object]) -> bytes | str:
    try:
        return encode_entry(fields)
    except InputError as exc:
        return f"refused: {exc}"


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
_text_or_odd = st.none() | st.text(max_size=20) | st.integers() | st.just(b"x")


@given(
    index=st.integers(min_value=-1, max_value=2**70) | st.just(True),
    time=st.sampled_from(
        ["2026-11-29T10:15:00.000000Z", "2026-11-29 10:15:00", "2026-11-29T10:15:00.000000Z\n"]
    ),
    kind=st.sampled_from([*ENTRY_KINDS, "allowed", ""]),
    principal=st.text(max_size=600) | st.integers(),
    optional=st.dictionaries(
        st.sampled_from(
            ["chain_hash", "policy_hash", "rule", "resource", "args_digest", "approver", "status"]
        ),
        _text_or_odd,
    ),
    args=st.dictionaries(st.text(max_size=8), _json_values, max_size=4)
    | st.dictionaries(st.integers(), st.integers(), min_size=1, max_size=2)
    | st.just({"x": float("nan")})
    | st.just([1]),
    reasons=st.lists(st.text(max_size=10), max_size=3)
    | st.tuples(st.text())
    | st.just(["ok", 1])
    | st.none(),
    extra=st.dictionaries(
        st.sampled_from(["budget_delta", "ref", "v", "bogus"]), st.integers(-2, 3) | st.none()
    ),
)
def test_encode_entry_is_the_models_encoding(
    index: object,
    time: str,
    kind: str,
    principal: object,
    optional: dict[str, object],
    args: object,
    reasons: object,
    extra: dict[str, object],
) -> None:
    fields = {
        "index": index,
        "time": time,
        "kind": kind,
        "principal": principal,
        "args": args,
        "reasons": reasons,
        **optional,
        **extra,
    }
    assert _fast_bytes(dict(fields)) == _model_bytes(dict(fields))


def test_encode_entry_matches_the_documented_example() -> None:
    fields = EXAMPLE.model_dump()
    assert encode_entry(fields) == EXAMPLE_BYTES


@given(_json_values)
def test_canonical_json_fast_path_is_the_reference_encoding(value: object) -> None:
    try:
        reference = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return  # a lone surrogate: no UTF-8 at all, the reference path raises as before
    assert canonical_json(value) == reference


def test_utc_now_is_in_entry_time_format_and_current() -> None:
    before = datetime.now(UTC)
    stamp = utc_now()
    after = datetime.now(UTC)
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z", stamp)
    parsed = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    assert before.replace(microsecond=0) <= parsed <= after


def test_encode_entry_takes_the_fast_path_for_a_decision_entry() -> None:
    # The property above holds whichever path runs; this one keeps the hot path in use.
    from agentgate.audit.entry import _fast_fields

    assert _fast_fields(EXAMPLE.model_dump()) is not None


# --- the fast encoder and the entry bound ---------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        {"kind": "approve"},
        {"index": -1},
        {"principal": ""},
        {"principal": "x" * 513},
        {"ref": -1},
        {"time": "2026-01-01T00:00:00.000000Z\n"},
    ],
)
def test_encode_entry_refuses_what_the_model_refuses(bad: dict[str, object]) -> None:
    """Kills: a check dropped from ``_fast_fields`` (kind in the set, index >= 0, principal 1..512
    characters, ref >= 0) or ``$`` for ``\\Z`` in the time pattern. Rule: the fast encoder writes
    nothing the model (and so ``from_bytes``, which verify uses) would refuse: such an entry
    would make the log unverifiable."""
    fields = {"index": 0, "time": "2026-01-01T00:00:00.000000Z", "kind": "allow", "principal": ALICE, **bad}
    with pytest.raises(InputError):
        encode_entry(fields)


def test_an_entry_over_the_limit_after_elision_is_refused_and_not_written(tmp_path: Path) -> None:
    """Kills: ``encode_bounded`` without its final refusal (an entry still over the limit after
    recording args and reasons by digest was written anyway). Rule: an entry is bounded or not
    written at all, never cut or let through over the bound."""
    log = _log(tmp_path, 1, max_entry_bytes=4096)
    with pytest.raises(InputError, match="over the log's limit"):
        log.append({"kind": "deny", "principal": ALICE, "resource": "tool:" + "x" * 5000})
    assert log.size() == 1 and log.verify().ok
