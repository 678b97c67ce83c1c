"""``Finding`` is a frozen dataclass, not a Pydantic model (review R81), so that the grant verbs
start without importing Pydantic (tests/test_cli_startup_imports.py). What a caller saw of the
model stays: construction from the kind's value, immutability, equality and hashing, a checked
copy, and the JSON form ``--json`` prints (the model's ``model_dump(mode="json",
exclude_none=True)``, which it replaces)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from agentgate.errors import InputError
from agentgate.findings import Finding, FindingKind, Severity


def test_a_kind_given_as_its_value_is_the_kind_and_the_two_findings_are_equal() -> None:
    named = Finding(kind=FindingKind.SCOPE_CREEP, code="budget_widened", message="m")
    written = Finding(kind="scope_creep", code="budget_widened", message="m")  # type: ignore[arg-type]
    assert written.kind is FindingKind.SCOPE_CREEP and written.severity is Severity.ERROR
    assert written == named and hash(written) == hash(named) and len({written, named}) == 1


def test_a_finding_cannot_be_changed_and_a_copy_is_checked_as_a_new_one() -> None:
    finding = Finding(kind=FindingKind.NON_REVOCABLE_GRANT, code="c", message="m")
    with pytest.raises(dataclasses.FrozenInstanceError):
        finding.code = "other"  # type: ignore[misc]
    assert dataclasses.replace(finding, grant="ab12").grant == "ab12"
    with pytest.raises(InputError, match="finding line must be a whole number, got True"):
        dataclasses.replace(finding, line=True)


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"kind": "scope-creep"}, "finding kind must be one of scope_creep, implicit_trust_inheritance, "),
        ({"kind": None}, "finding kind must be one of .*got None"),
        ({"severity": "fatal"}, "finding severity must be one of error, warning, got a str"),
        ({"code": 7}, "finding code must be text, got 7"),
        ({"message": None}, "finding message must be text, got None"),
        ({"file": b"p.yaml"}, "finding file must be text, got a bytes"),
        ({"hint": 1.5}, "finding hint must be text, got 1.5"),
        ({"grant": 7}, "finding grant must be text, got 7"),
        ({"field": ["amount"]}, "finding field must be text, got "),
        ({"line": "3"}, "finding line must be a whole number, got a str"),
        ({"line": 3.0}, "finding line must be a whole number, got 3.0"),
    ],
)
def test_a_field_of_the_wrong_type_is_an_input_error_naming_it(fields: dict[str, object], said: str) -> None:
    given: dict[str, object] = {"kind": "scope_creep", "code": "c", "message": "m", **fields}
    with pytest.raises(InputError, match=said):
        Finding(**given)  # type: ignore[arg-type]


def test_the_json_form_keeps_the_field_order_leaves_out_none_and_holds_plain_values() -> None:
    finding = Finding(
        kind=FindingKind.AUTHORITY_CHAIN_OPACITY,
        code="c",
        message="m",
        severity=Severity.WARNING,
        line=0,
        hint="h",
    )
    shown = finding.as_json()
    assert list(shown.items()) == [
        ("kind", "authority_chain_opacity"),
        ("code", "c"),
        ("message", "m"),
        ("severity", "warning"),
        ("line", 0),
        ("hint", "h"),
    ]
    assert {type(value) for value in shown.values()} == {str, int}  # the enums' values, not the enums
    assert json.loads(json.dumps(shown)) == shown
