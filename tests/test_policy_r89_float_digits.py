"""Review R89: a scalar tagged ``!!float`` is read as a number only when its text is a float as
YAML 1.2 writes one, in ASCII digits (agentgate/_yaml.py ``_FLOAT_TAGGED``), as ``!!int`` is. Python's
``float`` read full-width, mathematical and Arabic-Indic digits and surrounding blanks, so
``le: !!float "1\\u0660\\u0660"`` (zeros that show as dots) loaded as ``le: 100.0``."""

from __future__ import annotations

import math

import pytest
from test_yaml import _error, parser  # noqa: F401 (the fixture)

from agentgate._yaml import load_yaml
from agentgate.errors import PolicyError
from agentgate.policy import parse_policy

NOT_FLOATS = [
    "!!float ５００",  # full-width digits
    "!!float 𝟗𝟗",  # mathematical bold digits
    '!!float "1\\u0660\\u0660"',  # Arabic-Indic zeros
    "!!float ' 7'",
    "!!float '7 '",
    '!!float "\\u20037"',  # an em space before the digit
    "!!float '\\t7'",
    "!!float .iNf",
]


@pytest.mark.usefixtures("parser")
@pytest.mark.parametrize("value", NOT_FLOATS)
def test_a_tagged_float_not_written_in_ascii_as_yaml_writes_one_is_not_a_number(value: str) -> None:
    error = _error(f"version: 1\nname: {value}\n")
    assert error.message.startswith("not a number: "), error.message
    assert (error.line, error.column) == (2, 7)


@pytest.mark.usefixtures("parser")
def test_the_same_text_is_refused_tagged_int_and_tagged_float() -> None:
    for digits in ("５００", "' 7'"):
        assert _error(f"k: !!int {digits}\n").message == _error(f"k: !!float {digits}\n").message


@pytest.mark.usefixtures("parser")
def test_tagged_floats_yaml_writes_still_load() -> None:
    text = (
        "a: !!float 5\nb: !!float 1_000.5\nc: !!float -.5\nd: !!float 1e3\ne: !!float 1.5E+3\n"
        "f: !!float -.inf\ng: !!float '2.5'\nh: !!float -+1.5\ni: !!float .NaN\n"
    )
    data = load_yaml(text, source="p.yaml")[0]
    assert [data[k] for k in "abcdefgh"] == [5.0, 1000.5, -0.5, 1000.0, 1500.0, -math.inf, 2.5, -1.5]
    assert math.isnan(data["i"])


@pytest.mark.usefixtures("parser")
def test_a_constraint_bound_in_arabic_indic_digits_is_refused_at_its_line() -> None:
    text = (
        "version: 1\nprincipals:\n  alice: {kind: human, roles: [r]}\n"
        "tools:\n  payments.refund: {args: {amount: {type: number}}}\n"
        "roles:\n  r:\n    capabilities:\n      - resource: tool:payments.refund\n"
        '        constraints:\n          amount: {le: !!float "1\\u0660\\u0660"}\n'
    )
    with pytest.raises(PolicyError) as refused:
        parse_policy(text, source="p.yaml")
    assert (refused.value.line, refused.value.column) == (11, 24)
    assert refused.value.message.startswith("not a number: ")
