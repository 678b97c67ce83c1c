"""Explicit string tags, located reader errors, GPU prices that
fit the store, lifetimes of roles that only inherit, and empty or misplaced actions."""

from __future__ import annotations

import pytest

import agentgate._yaml
from agentgate._yaml import load_yaml
from agentgate.capabilities import Call
from agentgate.errors import PolicyError
from agentgate.policy import PolicyIndex, lint, parse_policy

DID = "did:key:z6MkkNV2MQswkwEnXrUkeM7T8qYE3qWB163VBePnsLBSTAru"


@pytest.fixture(params=["libyaml", "pure-python"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both parsers agentgate may run on: their marks count differently (bytes or characters)."""
    if request.param == "pure-python":
        monkeypatch.setattr(agentgate._yaml, "_Loader", agentgate._yaml._PureLoader)
    return str(request.param)


def _refusal(text: str | bytes) -> PolicyError:
    with pytest.raises(PolicyError) as info:
        parse_policy(text, source="p.yaml")
    return info.value


# --- an explicit !!str tag keeps the text -------------------------------------------------------


@pytest.mark.parametrize("value", ["5", "1e3", "-.5", "0o17", "0755", "09"])
def test_an_explicit_str_tag_is_text_not_a_number(value: str, parser: str) -> None:
    data, _ = load_yaml(f"a: !!str {value}\nb: &x !!str {value}\nc: [!!str {value}]\n", source="p.yaml")
    assert data == {"a": value, "b": value, "c": [value]}


def test_an_explicit_str_tag_in_a_file_with_a_byte_order_mark_is_text(parser: str) -> None:
    data, _ = load_yaml("\ufeffa: !!str 1e3\nb: 1e3\n", source="p.yaml")
    assert data == {"a": "1e3", "b": 1000.0}


def test_a_constraint_on_tagged_text_does_not_admit_the_number_it_spells() -> None:
    policy = parse_policy(
        f"""version: 1
principals: {{p: {{kind: service, did: {DID}, roles: [r]}}}}
models: {{m: {{cost_per_mtok: {{input: 1, output: 1}}}}}}
roles:
  r:
    ttl_s: 60
    capabilities:
      - resource: model:m
        constraints: {{tier: {{eq: !!str 1e3}}}}
""",
        source="p.yaml",
    )
    index = PolicyIndex(policy)
    assert index.evaluate("p", Call.model("m", {"tier": "1e3"})).allowed
    assert not index.evaluate("p", Call.model("m", {"tier": 1000})).allowed


# --- characters the reader refuses, and bytes that are not UTF-8, are located ----------------------


@pytest.mark.parametrize("bad", ["\x01", "\x7f", "\ufffe"])
def test_a_control_character_is_refused_with_its_line_and_column(bad: str, parser: str) -> None:
    error = _refusal(f"version: 1\nname: ok\ndescription: ab{bad}c\n")
    assert (error.line, error.column) == (3, 16)
    assert "p.yaml:3:16:" in str(error)


def test_a_control_character_after_a_crlf_and_a_byte_order_mark_is_located(parser: str) -> None:
    error = _refusal("\ufeffversion: 1\r\nname: é\x01\r\n")
    assert (error.line, error.column) == (2, 8)


def test_bytes_that_are_not_utf8_are_refused_with_their_line_and_column() -> None:
    error = _refusal("version: 1\nname: ok\ndescription: é".encode() + b"\xff\n")
    assert (error.line, error.column) == (3, 15)
    assert "not UTF-8" in error.message


# --- GPU prices fit the 64-bit columns that record them ------------------------------------------------


def test_a_gpu_price_above_what_a_64_bit_column_holds_is_refused_where_it_is_written() -> None:
    error = _refusal("version: 1\ngpus:\n  h100: {cost_per_gpu_hour: 9223372036854775808}\n")
    assert (error.line, error.column) == (3, 29)
    assert "cost_per_gpu_hour" in error.message
    policy = parse_policy("version: 1\ngpus:\n  h100: {cost_per_gpu_hour: 9223372036854775807}\n")
    assert policy.document.gpus["h100"].cost_per_gpu_hour == 2**63 - 1


# --- a role that only inherits its rules still needs a lifetime of its own --------------------------


def test_a_role_whose_rules_are_all_inherited_and_has_no_ttl_is_flagged() -> None:
    policy = parse_policy(
        f"""version: 1
principals:
  alice: {{kind: human, did: {DID}, roles: [lead]}}
tools:
  tickets.read: {{args: {{id: {{type: string}}}}}}
roles:
  base:
    kind: human
    capabilities: [{{resource: "tool:tickets.read"}}]
    ttl_s: 600
  lead:
    kind: human
    inherits: [base]
""",
        source="p.yaml",
    )
    assert [(f.code, f.line) for f in lint(policy)] == [("role_without_ttl", 11)]


def test_a_role_with_no_rules_at_all_needs_no_ttl() -> None:
    policy = parse_policy("version: 1\nroles:\n  empty: {description: nothing yet}\n", source="p.yaml")
    assert [f.code for f in lint(policy)] == []


# --- actions: an empty one is refused, and a bad one is located at the action ----------------------

_RULE = """version: 1
tools: {t: {}}
roles:
  r:
    ttl_s: 60
    capabilities:
      - resource: tool:t
        action: %s
"""


@pytest.mark.parametrize("action", ["''", "' invoke'", "Invoke"])
def test_an_action_that_is_not_an_identifier_is_refused_at_the_action(action: str) -> None:
    error = _refusal(_RULE % action)
    assert (error.line, error.column) == (8, 17)
    assert "action" in error.message


def test_a_missing_or_null_action_is_the_kinds_default() -> None:
    policy = parse_policy(_RULE % "null", source="p.yaml")
    assert policy.rules["r"][0].capability.action == "invoke"


def test_a_constrained_argument_name_that_is_no_identifier_is_refused_at_the_constraints() -> None:
    text = _RULE.replace("        action: %s\n", "        constraints:\n          ' amount': {le: 5}\n")
    error = _refusal(text)
    assert (error.line, error.column) == (9, 11)
    assert "' amount' is not an identifier" in error.message
