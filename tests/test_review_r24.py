"""Review R24: the policy language checked against docs/policy-reference.md as its specification.

Each test reproduces a place where the loader, the index or lint did something other than what
the reference says (and now does what it says), or checks mechanically, over generated input, a
promise of the reference that the earlier review passes left open.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgate._yaml import load_yaml
from agentgate.capabilities import Call
from agentgate.errors import PolicyError
from agentgate.policy import Outcome, PolicyIndex, parse_policy
from agentgate.policy._lint import lint

_DID = "did:key:z6MkqQP5oTUxZ95rgbJg29FwyrJ5N8HrRPpEBQbPrAUCkPXm"

_BASE = f"""version: 1
principals:
  bot: {{kind: agent, did: "{_DID}", roles: [r]}}
tools:
  payments.refund: {{args: {{amount: {{type: number}}}}}}
roles:
  r:
    kind: agent
    ttl_s: 600
    capabilities:
      - resource: tool:payments.refund
"""


# --- a quota on a resource that is not declared ------------------------------------------------


def _quota(resources: str | None) -> str:
    listed = f"\n    resources: {resources}" if resources is not None else ""
    return _BASE + f"quotas:\n  refunds:\n    principal: bot\n    window_s: 3600\n    limit: 5{listed}\n"


def test_a_quota_on_a_misspelt_tool_is_a_lint_error_not_a_silent_absence_of_limit() -> None:
    # The quota reads as "5 refunds an hour" but counts nothing: every refund runs without it.
    policy = parse_policy(_quota("[tool:payments.refnd]"), source="q.yaml")
    decision = PolicyIndex(policy).evaluate("bot", Call.tool("payments.refund", {"amount": 1}))
    assert decision.outcome is Outcome.ALLOW and decision.quotas == ()
    findings = [f for f in lint(policy) if f.code == "rule_for_undeclared_resource"]
    assert len(findings) == 1
    assert findings[0].severity.value == "error"
    assert findings[0].line == 17 and "quota refunds" in findings[0].message
    assert "tool:payments.refnd" in findings[0].message


def test_a_quota_wildcard_that_names_nothing_is_a_warning_and_the_default_is_not_flagged() -> None:
    wild = [f for f in lint(parse_policy(_quota("['tool:payment.*']"))) if "quota" in f.message]
    assert [(f.code, f.severity.value) for f in wild] == [("rule_for_undeclared_resource", "warning")]
    # The default resources (tool:*, model:*) and a correct name are clean, with no model declared.
    for resources in (None, "[tool:payments.refund]", "['tool:payments.*']"):
        assert not [f for f in lint(parse_policy(_quota(resources))) if "quota" in f.message]


# --- numbers as YAML 1.2 reads them -----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [("1.5e3", 1500.0), ("-.5", -0.5), (".5e1", 5.0), ("1.e2", 100.0), ("0o17", 15), ("-0o17", -15)],
)
def test_numbers_yaml_1_1_reads_as_text_are_numbers_as_the_reference_says(text: str, value: float) -> None:
    data, _ = load_yaml(f"a: {text}\nb: '{text}'\n", source="x.yaml")
    assert data["a"] == value and type(data["a"]) is type(value)
    assert data["b"] == text  # quoted: text


@pytest.mark.parametrize("text", ["09", "-08", "0_9"])
def test_a_leading_zero_that_yaml_1_1_reads_as_text_is_refused_as_ambiguous_too(text: str) -> None:
    with pytest.raises(PolicyError, match=r"x\.yaml:2:5: ambiguous number"):
        load_yaml(f"a: 1\nb: [{text}]\n", source="x.yaml")


def test_a_constraint_written_in_exponent_form_constrains_the_number() -> None:
    policy = parse_policy(
        _BASE + "        constraints: {amount: {in: [1.5e3, -.5]}}\n      - resource: tool:payments.refund\n"
        "        constraints: {amount: {le: 2.5e2}}\n"
    )
    index = PolicyIndex(policy)

    def outcome(amount: float) -> Outcome:
        return index.evaluate("bot", Call.tool("payments.refund", {"amount": amount})).outcome

    assert outcome(1500) is Outcome.ALLOW and outcome(-0.5) is Outcome.ALLOW
    assert outcome(250) is Outcome.ALLOW and outcome(251) is Outcome.DENY
    timeout = parse_policy(_BASE.replace("{args:", "{timeout_s: 1.5e1, args:"))
    assert timeout.document.tools["payments.refund"].timeout_s == 15.0


@settings(max_examples=150, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False, width=64), st.sampled_from(["e", "E"]))
def test_any_float_written_in_yaml_1_2_exponent_form_loads_as_that_float(x: float, e: str) -> None:
    forms = [repr(x), f"{x:.17e}".replace("e+", e).replace("e-", e + "-")]
    for form in forms:
        data, _ = load_yaml(f"v: {form}\n", source="x.yaml")
        assert data["v"] == x, form
