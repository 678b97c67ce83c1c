"""(From a review) the ``encode_entry`` fast path refuses exactly what ``AuditEntry.build`` refuses,
with the same exception (``InputError``), for field sets the property test does not draw."""

from __future__ import annotations

import pytest

from agentgate.audit.entry import AuditEntry, encode_entry, utc_now
from agentgate.errors import InputError
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog


@pytest.mark.parametrize("missing", ["index", "time", "kind", "principal"])
def test_a_misspelt_field_in_place_of_a_required_one_is_an_input_error(missing: str) -> None:
    """HIGH (found): one unknown field plus one missing required field keeps the field count the
    fast path checks, which then reads the missing field and raises ``KeyError``."""
    fields = {"index": 0, "time": utc_now(), "kind": "allow", "principal": "did:key:zabc"}
    fields["x_" + missing] = fields.pop(missing)
    with pytest.raises(InputError):
        AuditEntry.build(**dict(fields))
    with pytest.raises(InputError):
        encode_entry(fields)


def test_the_audit_log_refuses_a_misspelt_principal_with_an_input_error(sqlite_store: SQLiteStore) -> None:
    log = AuditLog(sqlite_store, SigningKey(b"\x07" * 32), origin="test.example/audit")
    with pytest.raises(InputError):
        log.append({"kind": "allow", "prinicpal": "did:key:zabc"})
    assert log.size() == 0


@pytest.mark.parametrize(
    "fields",
    [
        {"reasons": ["\ud800"]},
        {"resource": "tool:\ud800"},
        {"args": {"k": "\ud800"}},
        {"principal": "\ud800"},
    ],
)
def test_text_that_is_not_utf8_encodable_is_an_input_error(fields: dict[str, object]) -> None:
    """HIGH (found; pre-existing: ``AuditEntry.to_bytes`` raises the same; the cause of the Gate
    finding in tests/test_authority_held.py): a lone surrogate anywhere in an entry raises
    ``UnicodeEncodeError`` from the encoder instead of ``InputError``."""
    base = {"index": 0, "time": utc_now(), "kind": "deny", "principal": "did:key:zabc", **fields}
    with pytest.raises(InputError):
        encode_entry(base)


@pytest.mark.parametrize(
    "reasons", ["no grant for tool:payments.refund", b"no grant", {"no grant"}, {"no": "grant"}, None, 7]
)
def test_reasons_that_are_not_a_list_or_tuple_are_an_input_error_not_split(
    reasons: object, sqlite_store: SQLiteStore
) -> None:
    """Review R54: ``AuditLog.append({..., "reasons": "no grant for tool:payments.refund"})`` wrote
    an entry whose reasons were ``["n", "o", " ", "g", ...]``, one per character (``build`` ran
    ``tuple()`` over whatever it was given; a set was recorded in an order that changes from run
    to run). Rule: ``reasons`` is a list or tuple of strings; anything else is an ``InputError``
    and nothing is written."""
    log = AuditLog(sqlite_store, SigningKey(b"\x07" * 32), origin="test.example/audit")
    with pytest.raises(InputError, match="reasons"):
        log.append({"kind": "deny", "principal": "did:key:zabc", "reasons": reasons})
    with pytest.raises(InputError, match="reasons"):
        AuditEntry.build(index=0, time=utc_now(), kind="deny", principal="did:key:zabc", reasons=reasons)
    assert log.size() == 0
    log.append({"kind": "deny", "principal": "did:key:zabc", "reasons": ("no grant",)})
    assert log.entry(0).reasons == ("no grant",)
