"""The policy language checked against docs/policy-reference.md as its specification.

Each test reproduces a place where the loader, the index or lint did something other than what
the reference says (and now does what it says), or checks mechanically, over generated input, a
promise of the reference that the earlier review passes left open.
"""

from __future__ import annotations

import copy
import json
import math
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from pydantic.fields import FieldInfo

import agentgate._yaml
from agentgate._yaml import load_yaml
from agentgate.capabilities import Call, pattern_matches
from agentgate.cli.main import main
from agentgate.dispatch.inventory import parse_inventory
from agentgate.errors import InventoryError, PolicyError
from agentgate.policy import Outcome, PolicyIndex, parse_policy
from agentgate.policy import _schema as schema
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


# --- every limit the reference states, mutated one at a time --------------------------------

_MAX_S = 315_360_000
_FULL: dict[str, Any] = {
    "version": 1,
    "settings": {"max_ttl_s": 86400, "revocation": True},
    "trust_anchors": {"root": {"did": _DID}},
    "tenants": {"acme": {}},
    "principals": {
        "bot": {"kind": "agent", "did": _DID, "tenant": "acme", "roles": ["r"]},
        "alice": {"kind": "human", "roles": []},
        "bob": {"kind": "human", "roles": []},
    },
    "tools": {
        "pay": {
            "args": {"amount": {"type": "number", "required": True}},
            "idempotent": False,
            "takes_idempotency_key": True,
            "timeout_s": 15,
            "concurrency": 2,
            "rate": {"per_second": 0.5, "burst": 2},
            "retry": {"attempts": 2, "backoff_initial_s": 0.1, "backoff_max_s": 1, "multiplier": 2},
            "loggable": ["amount"],
            "audit": True,
        }
    },
    "models": {
        "m": {"cost_per_mtok": {"input": 1, "output": 2}, "priority_classes": ["p"], "slo": {"ttft_ms": 5}}
    },
    "gpus": {"h100": {"cost_per_gpu_hour": 2500000}},
    "priority_classes": {"p": {"rank": 0, "weight": 1, "preemptible": False}},
    "roles": {
        "base": {"capabilities": [{"resource": "model:m"}]},
        "r": {
            "kind": "agent",
            "inherits": ["base"],
            "capabilities": [{"resource": "tool:pay", "constraints": {"amount": {"gt": 0, "le": 2000}}}],
            "budget": {"limit": 5, "unit": "usd_micros"},
            "ttl_s": 600,
            "delegation": {"max_depth": 1, "max_ttl_s": 300, "share_grant": False},
            "revocable": True,
        },
    },
    "quotas": {
        "q": {"principal": "bot", "window_s": 60, "limit": 5, "unit": "calls", "resources": ["tool:pay"]}
    },
    "approvals": {
        "g": {
            "resource": "tool:pay",
            "when": {"amount": {"gt": 500}},
            "approvers": ["alice", "bob"],
            "quorum": 1,
            "expiry_s": 60,
        }
    },
}

_MUTATIONS: list[tuple[str, object]] = [
    ("settings.max_ttl_s", 0),
    ("settings.max_ttl_s", _MAX_S + 1),
    ("settings.max_ttl_s", "600"),
    ("settings.max_ttl_s", 1.5),
    ("settings.max_ttl_s", True),
    ("settings.revocation", "false"),
    ("settings.revocation", "no"),
    ("settings.revocation", 1),
    ("settings.tll", 1),
    ("trust_anchors.root.did", "did:web:example.com"),
    ("trust_anchors.root.did", 5),
    ("trust_anchors.Root Key", {"did": _DID}),
    ("tenants.acme.name", "x"),
    ("principals.bot.kind", "robot"),
    ("principals.bot.kind", None),
    ("principals.bot.tenant", "acme2"),
    ("principals.bot.roles", ["nope"]),
    ("principals.bot.roles", "r"),
    ("principals.bot.did", " " + _DID),
    ("tools.pay.args.amount.type", "float"),
    ("tools.pay.args.amount.required", "true"),
    ("tools.pay.timeout_s", 0),
    ("tools.pay.timeout_s", -1),
    ("tools.pay.timeout_s", math.inf),
    ("tools.pay.timeout_s", math.nan),
    ("tools.pay.timeout_s", "30"),
    ("tools.pay.concurrency", 0),
    ("tools.pay.concurrency", 1.0),
    ("tools.pay.concurrency", True),
    ("tools.pay.rate.per_second", 0),
    ("tools.pay.rate.per_second", -1),
    ("tools.pay.rate.burst", 0),
    ("tools.pay.rate.burst", 2**53 + 1),
    ("tools.pay.rate.burst", 1.0),
    ("tools.pay.retry.attempts", 0),
    ("tools.pay.retry.attempts", 21),
    ("tools.pay.retry.backoff_initial_s", -0.1),
    ("tools.pay.retry.backoff_max_s", 0.05),
    ("tools.pay.retry.backoff_max_s", 86_400.5),  # R54: over a day, refused at load, not at Gate
    ("tools.pay.retry.backoff_initial_s", 86_401),
    ("tools.pay.retry.multiplier", 0.5),
    ("tools.pay.retry.retry_on", ["transient", "transient"]),
    ("tools.pay.retry.retry_on", ["fatal"]),
    ("tools.pay.idempotent", "no"),
    ("tools.pay.audit", 0),
    ("tools.pay.loggable", "amount"),
    ("tools.pay.timout_s", 1),
    ("tools.Pay", {}),
    ("tools.pay ", {}),
    ("tools.pay\u200b", {}),
    ("tools.pаy", {}),
    ("models.m.cost_per_mtok.input", -1),
    ("models.m.cost_per_mtok.input", 1.5),
    ("models.m.priority_classes", ["nope"]),
    ("models.m.slo.ttft_ms", 0),
    ("models.m.cost_per_mtok", None),
    ("gpus.H100", {"cost_per_gpu_hour": 1}),
    ("gpus.h100.cost_per_gpu_hour", -1),
    ("gpus.h100.cost_per_gpu_hour", 2.5),
    ("priority_classes.p.rank", -1),
    ("priority_classes.p.rank", 1001),
    ("priority_classes.p.weight", 0),
    ("priority_classes.p.weight", -1),
    ("priority_classes.p.preemptible", "yes"),
    ("roles.r.kind", "bot"),
    ("roles.r.inherits", ["nope"]),
    ("roles.base.inherits", ["r"]),
    ("roles.r.capabilities.0.resource", "tool:Pay"),
    ("roles.r.capabilities.0.resource", "pay"),
    ("roles.r.capabilities.0.resource", "tool:"),
    ("roles.r.capabilities.0.action", "Invoke"),
    ("roles.r.capabilities.0.constraints.amount", {"<=": 5}),
    ("roles.r.capabilities.0.constraints.amount", {"le": "5"}),
    ("roles.r.capabilities.0.constraints.amount", {"in": []}),
    ("roles.r.capabilities.0.constraints.amount", {"in": list(range(1001))}),
    ("roles.r.capabilities.0.constraints.amount", {"prefix": 5}),
    ("roles.r.capabilities.0.constraints.amount", {"eq": None}),
    ("roles.r.capabilities.0.constraints.amount", {"le": True}),
    ("roles.r.capabilities.0.constraints.amount", {"le": 2**63}),
    ("roles.r.capabilities.0.constraints.amount", {"le": None}),
    ("roles.r.capabilities.0.constraints.amount", {}),
    ("roles.r.capabilities.0.constraints.amount", None),
    ("roles.r.capabilities.0.constraints", None),
    ("roles.r.capabilities", None),
    ("roles.r.capabilities.0.constraints.am ount", {"le": 5}),
    ("roles.r.budget.limit", -1),
    ("roles.r.budget.limit", 2**63),
    ("roles.r.budget.unit", "usd"),
    ("roles.r.budget.limit", 5.0),
    ("roles.r.ttl_s", 0),
    ("roles.r.ttl_s", _MAX_S + 1),
    ("roles.r.delegation.max_depth", 16),
    ("roles.r.delegation.max_depth", -1),
    ("roles.r.delegation.max_ttl_s", 0),
    ("roles.r.delegation.share_grant", "no"),
    ("roles.r.delegation.budget", {"limit": -1}),
    ("roles.r.revocable", "false"),
    ("roles.r.tll_s", 5),
    ("quotas.q.window_s", 0),
    ("quotas.q.window_s", _MAX_S + 1),
    ("quotas.q.limit", -1),
    ("quotas.q.limit", 2**63),
    ("quotas.q.unit", "dollars"),
    ("quotas.q.resources", ["tool:Pay"]),
    ("quotas.q.tenant", "acme"),
    ("quotas.q.principal", None),
    ("quotas.q.principal", "nobody"),
    ("approvals.g.approvers", []),
    ("approvals.g.approvers", ["nobody"]),
    ("approvals.g.quorum", 0),
    ("approvals.g.quorum", 1001),
    ("approvals.g.quorum", 3),
    ("approvals.g.expiry_s", 0),
    ("approvals.g.expiry_s", _MAX_S + 1),
    ("approvals.g.resource", "tool:Pay"),
    ("approvals.g.when", {"amount": {"==": 5}}),
    ("approvals.g.when", {"amount": {"gt": None}}),
    ("approvals.g.when", None),
    ("version", 2),
    ("version", "1"),
    ("version", 1.0),
    ("version", True),
]


def _mutated(path: str, value: object) -> dict[str, Any]:
    doc = copy.deepcopy(_FULL)
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    node: Any = doc
    for part in parents:
        node = node[part]
    node[last] = value
    return doc


def test_the_full_policy_loads_and_every_field_is_read_as_written() -> None:
    policy = parse_policy(yaml.safe_dump(_FULL, sort_keys=False), source="full.yaml")
    assert policy.document.model_dump(by_alias=True, exclude_unset=True) == _FULL


@pytest.mark.parametrize(("path", "value"), _MUTATIONS, ids=[f"{p}={v!r}"[:60] for p, v in _MUTATIONS])
def test_each_value_the_reference_forbids_is_refused_at_its_line(path: str, value: object) -> None:
    text = yaml.safe_dump(_mutated(path, value), sort_keys=False, allow_unicode=True)
    _, locations = load_yaml(text, source="m.yaml")
    loc = tuple(int(p) if p.isdigit() else p for p in path.split("."))
    # The error is located at the mutated key or value, inside it, or at a section holding it
    # (a rule across fields, such as "exactly one of tenant, principal, role", names the section).
    marks = [*locations.keys.items(), *locations.values.items()]
    lines = {m.line + 1 for p, m in marks if p[: len(loc)] == loc or (loc[: len(p)] == p and p)}
    with pytest.raises(PolicyError) as caught:
        parse_policy(text, source="m.yaml")
    error = caught.value
    assert "\n" not in str(error) and str(error).startswith(f"m.yaml:{error.line}:")
    assert error.line in lines, (str(error), sorted(lines))


# --- the reference's own examples --------------------------------------------------------------

_REPO = Path(__file__).resolve().parents[1]


def _merge(into: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            assert key not in into, f"two examples set {key}"
            into[key] = value


def reference_examples() -> dict[str, Any]:
    """The reference's YAML examples as one policy document, as its closing sentence of "Top
    level" says they go together (tests/test_docs_r63_policy_reference.py lints it too)."""
    text = (_REPO / "docs" / "policy-reference.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```yaml\n(.*?)```", text, re.S)
    doc: dict[str, Any] = {}
    fragments: list[Any] = []
    for block in blocks:
        data, _ = load_yaml(textwrap.dedent(block), source="policy-reference.md")
        if isinstance(data, dict) and set(data) <= set(_FULL) | {"delegation"} and "delegation" not in data:
            _merge(doc, data)
        else:
            fragments.append(data)
    # The two indented fragments: more capabilities of a role, and its delegation rule.
    capabilities, delegation = fragments
    agent = doc["roles"]["support-agent"]
    agent["capabilities"] += capabilities
    agent.update(delegation)
    # What the examples name without declaring it in another example.
    _merge(
        doc,
        {
            "tenants": {"team-a": {}},
            "principals": {"bob": {"kind": "human", "did": _DID}},
            "tools": {"tickets.read": {}, "web.fetch": {"args": {"url": {"type": "string"}}}},
            "roles": {"support-lead": {"kind": "human"}},
        },
    )
    return doc


def test_the_references_examples_together_load_and_mean_what_the_text_says() -> None:
    doc = reference_examples()
    policy = parse_policy(json.dumps(doc), source="reference.yaml", base_dir=_REPO / "policies")
    index = PolicyIndex(policy)
    refund = {"order_id": "o1", "currency": "EUR"}

    def outcome(**args: object) -> Outcome:
        return index.evaluate("support-agent", Call.tool("payments.refund", {**refund, **args})).outcome

    # "amount: {gt: 0, le: 2000}", "currency: {in: [EUR, USD]}", and the gate "amount: {gt: 500}".
    assert outcome(amount=100) is Outcome.ALLOW
    assert outcome(amount=900) is Outcome.APPROVAL_REQUIRED
    assert outcome(amount=2001) is Outcome.DENY and outcome(amount=0) is Outcome.DENY
    assert outcome(amount=100, currency="GBP") is Outcome.DENY
    fetch = index.evaluate("support-agent", Call.tool("web.fetch", {"url": "https://arxiv.org/abs/1"}))
    assert fetch.outcome is Outcome.ALLOW
    gen = index.evaluate("support-agent", Call.model("llama-3.1-8b", {"max_tokens": 4096}))
    assert gen.outcome is Outcome.DENY  # max_tokens: {le: 2048}
    assert policy.document.settings.max_ttl_s == 86400
    assert policy.document.gpus["h100"].lease_cost(1, 3600) == 2_500_000


# --- a model's priority classes -----------------------------------------------------------------


def test_a_request_in_a_priority_class_the_model_does_not_take_is_denied() -> None:
    # "priority_classes: classes requests for this model may use": the large model is for batch
    # work only. A rule that does not constrain priority allowed an interactive request (routed
    # at rank 0, ahead of everything) all the same.
    policy = parse_policy(
        f"""version: 1
principals:
  svc: {{kind: service, did: "{_DID}", roles: [inference]}}
priority_classes:
  interactive: {{rank: 0}}
  batch: {{rank: 1}}
models:
  big: {{cost_per_mtok: {{input: 1, output: 1}}, priority_classes: [batch]}}
  small: {{cost_per_mtok: {{input: 1, output: 1}}}}
roles:
  inference:
    ttl_s: 600
    capabilities:
      - resource: model:big
      - resource: model:small
"""
    )
    index = PolicyIndex(policy)

    def decide(model: str, **args: object) -> Outcome:
        return index.evaluate("svc", Call.model(model, {"max_tokens": 10, **args})).outcome

    assert decide("big", priority="batch") is Outcome.ALLOW
    assert decide("big") is Outcome.ALLOW  # names no class: the dispatcher's default
    assert decide("big", priority="interactive") is Outcome.DENY
    assert decide("big", priority=1) is Outcome.DENY
    reasons = index.evaluate("svc", Call.model("big", {"priority": "interactive"})).reasons
    assert reasons == ("model:big takes the priority classes batch, not 'interactive'",)
    # A model that lists no classes leaves the class to the rules.
    assert decide("small", priority="interactive") is Outcome.ALLOW


# --- deep nesting ---------------------------------------------------------------------------------


@pytest.mark.parametrize("parser", ["libyaml", "pure-python"])
@pytest.mark.parametrize("nested", ["{a: " * 990 + "1" + "}" * 990, "[" * 990 + "]" * 990])
def test_a_deeply_nested_file_is_a_policy_error_not_a_recursion_error(
    nested: str, parser: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 2 KB of brackets: building the data recursed past Python's limit (RecursionError, a
    # traceback from `agentgate policy lint`), below libyaml's own limit of 1,000 levels.
    if parser == "pure-python":
        monkeypatch.setattr(agentgate._yaml, "_Loader", agentgate._yaml._PureLoader)
    with pytest.raises(PolicyError, match=r"^deep\.yaml:.*nested more than 100 levels deep"):
        parse_policy(f"version: 1\nname: {nested}\n", source="deep.yaml")
    # Ninety-odd levels are still read (the file is refused for its content, not its depth).
    with pytest.raises(PolicyError, match=r"name: Input should be a valid string"):
        parse_policy("version: 1\nname: " + "[" * 98 + "]" * 98 + "\n", source="deep.yaml")


# --- the defaults the reference's tables state ----------------------------------------------------

_SECTIONS: dict[str, type[BaseModel]] = {
    "Top level": schema.PolicyDocument,
    "settings": schema.Settings,
    "principals": schema.Principal,
    "tools": schema.Tool,
    "priority_classes": schema.PriorityClass,
    "roles": schema.Role,
    "capabilities": schema.CapabilityRule,
    "delegation": schema.Delegation,
    "quotas": schema.Quota,
    "approvals": schema.ApprovalGate,
}
_SUBMODELS: dict[str, type[BaseModel]] = {
    "args.NAME": schema.Argument,
    "rate": schema.RateLimit,
    "retry": schema.RetryPolicy,
    "budget": schema.Budget,
}


def _reference_defaults() -> list[tuple[str, str, str]]:
    """(section, field, default cell) of every table row of the reference that has a default column."""
    text = (_REPO / "docs" / "policy-reference.md").read_text(encoding="utf-8")
    rows: list[tuple[str, str, str]] = []
    section, has_default = "", False
    for line in text.splitlines():
        if line.startswith("#"):
            section = line.strip("# ")
        elif line.startswith("| ") and not line.startswith("| `"):  # a table's header
            has_default = line.startswith("| field |") and "| default |" in line
        elif line.startswith("| `") and has_default:
            cells = [c.strip() for c in line.replace("\\|", "/").strip("|").split("|")]
            rows.append((section, cells[0], cells[2]))
    return rows


def _field(section: str, name: str) -> FieldInfo:
    model = _SECTIONS[section]
    prefix, _, last = name.rpartition(".")
    if prefix:
        model = _SUBMODELS[prefix]
    return model.model_fields[last if last != "in" else "in_"]


def test_every_default_the_reference_states_is_the_loaders() -> None:
    rows = [(s, n.strip("`"), d) for s, n, d in _reference_defaults() if s in _SECTIONS and "/" not in n]
    assert len(rows) > 50
    checked = 0
    for section, name, cell in rows:
        info = _field(section, name)
        if cell.startswith("required"):
            assert info.is_required(), (section, name)
            continue
        literal = re.fullmatch(r"`([^`]*)`(?: \(.*\))?", cell)
        if literal is None:  # "unlimited", "none", "the kind's: ...", or empty: no value given
            assert not info.is_required(), (section, name)
            continue
        written = yaml.safe_load(literal.group(1))
        default = info.get_default(call_default_factory=True)
        if isinstance(default, BaseModel):
            default = default.model_dump()
        assert default == written and type(default) in (type(written), float), (section, name, default, cell)
        checked += 1
    assert checked >= 35


def test_a_plain_equals_sign_or_double_angle_value_is_text_as_in_yaml_1_2() -> None:
    # YAML 1.1 gives '=' and '<<' tags of their own, so they were refused as "tags"; a merge KEY
    # is still refused.
    data, _ = load_yaml("a: [=, <<, '=']\nb: =\n", source="x.yaml")
    assert data == {"a": ["=", "<<", "="], "b": "="}
    policy = parse_policy(_BASE + "        constraints: {amount: {in: [=, <<]}}\n".replace("amount", "op"))
    assert policy.rules["r"][0].capability.constraints[0][1].one_of == ("=", "<<")
    with pytest.raises(PolicyError, match="merge keys"):
        load_yaml("a: {<<: {b: 1}}\n", source="x.yaml")


def test_a_plain_date_is_text_as_in_yaml_1_2_not_a_timestamp() -> None:
    # YAML 1.1 made it a datetime.date, which every field refused ("Input should be a valid string").
    policy = parse_policy(
        "description: 2026-01-31\n"
        + _BASE
        + "        constraints: {amount: {in: [2026-01-31]}}\n".replace("amount", "day")
    )
    assert policy.document.description == "2026-01-31"
    assert policy.rules["r"][0].capability.constraints[0][1].eq == "2026-01-31"


_BOUNDARIES: list[tuple[str, object]] = [
    ("settings.max_ttl_s", _MAX_S),
    ("settings.max_ttl_s", 1),
    ("tools.pay.timeout_s", 1e-9),
    ("tools.pay.timeout_s", 0.5),
    ("tools.pay.concurrency", 1),
    ("tools.pay.rate.burst", 2**53),
    ("tools.pay.rate.per_second", 1e-6),
    ("tools.pay.retry.attempts", 20),
    ("tools.pay.retry.attempts", 1),
    ("tools.pay.retry.backoff_initial_s", 0),
    ("tools.pay.retry.multiplier", 1),
    ("tools.pay.retry.backoff_max_s", 0.1),
    ("tools.pay.retry.backoff_max_s", 86_400),
    ("tools.pay.retry.retry_on", ["transient", "timeout", "connection", "error"]),
    ("tools.pay.retry.retry_on", []),
    ("models.m.cost_per_mtok.input", 0),
    ("gpus.h100.cost_per_gpu_hour", 0),
    ("priority_classes.p.rank", 1000),
    ("priority_classes.p.weight", 1e-3),
    ("roles.r.budget.limit", 2**63 - 1),
    ("roles.r.budget.limit", 0),
    ("roles.r.ttl_s", _MAX_S),
    ("roles.r.delegation.max_depth", 15),
    ("roles.r.delegation.max_depth", 0),
    ("roles.r.delegation.max_ttl_s", _MAX_S),
    ("roles.r.capabilities.0.constraints.amount", {"in": list(range(1000))}),
    ("roles.r.capabilities.0.constraints.amount", {"le": 2**63 - 1, "ge": -(2**63) + 1}),
    ("roles.r.capabilities.0.action", "*"),
    ("quotas.q.limit", 0),
    ("quotas.q.limit", 2**63 - 1),
    ("quotas.q.window_s", _MAX_S),
    ("quotas.q.unit", "usd_micros"),
    ("quotas.q.resources", []),
    ("approvals.g.quorum", 2),
    ("approvals.g.approvers", ["alice", "alice", "bob"]),
    ("approvals.g.expiry_s", _MAX_S),
    ("approvals.g.expiry_s", 1),
    ("approvals.g.when", {}),
    ("approvals.g.resource", "tool:*"),
    ("tools.a-b_c9", {}),
    ("models.Org/Model-7B:fp8", {"cost_per_mtok": {"input": 1, "output": 1}}),
]


@pytest.mark.parametrize(("path", "value"), _BOUNDARIES, ids=[f"{p}={v!r}"[:60] for p, v in _BOUNDARIES])
def test_each_value_at_the_edge_of_what_the_reference_allows_loads_as_written(
    path: str, value: object
) -> None:
    doc = _mutated(path, value)
    policy = parse_policy(yaml.safe_dump(doc, sort_keys=False), source="edge.yaml")
    assert policy.document.model_dump(by_alias=True, exclude_unset=True) == doc


# --- which quotas count a call ---------------------------------------------------------------------

_QROLES = ["r0", "r1", "r2", "r3"]
_QTOOLS = ["a.x", "a.y", "b"]
_QPATTERNS = ["tool:*", "tool:a.*", "tool:a.x", "tool:b", "model:*", "model:m"]


@settings(max_examples=150, deadline=None)
@given(
    inherits=st.fixed_dictionaries(
        {r: st.lists(st.sampled_from(_QROLES), max_size=2, unique=True) for r in _QROLES}
    ),
    held=st.fixed_dictionaries(
        {p: st.lists(st.sampled_from(_QROLES), max_size=2, unique=True) for p in ("p0", "p1")}
    ),
    tenants=st.fixed_dictionaries({p: st.sampled_from([None, "t0", "t1"]) for p in ("p0", "p1")}),
    quotas=st.lists(
        st.tuples(
            st.sampled_from(["tenant", "principal", "role"]),
            st.sampled_from(["t0", "t1", "p0", "p1", *_QROLES]),
            st.one_of(st.none(), st.lists(st.sampled_from(_QPATTERNS), max_size=3)),
        ),
        max_size=5,
    ),
)
def test_the_quotas_an_allow_names_are_those_the_reference_says_count_the_call(
    inherits: dict[str, list[str]],
    held: dict[str, list[str]],
    tenants: dict[str, str | None],
    quotas: list[tuple[str, str, list[str] | None]],
) -> None:
    # "each quota that counts the call (its subject is the caller's tenant, principal or one of
    # its roles, and one of its resources matches)"; roles include inherited ones; the default
    # resources are tool:* and model:*.
    doc: dict[str, Any] = {
        "version": 1,
        "tenants": {"t0": {}, "t1": {}},
        "principals": {
            p: {"kind": "service", "roles": held[p], **({"tenant": tenants[p]} if tenants[p] else {})}
            for p in held
        },
        "tools": {t: {} for t in _QTOOLS},
        "models": {"m": {"cost_per_mtok": {"input": 1, "output": 1}}},
        "roles": {
            r: {
                "inherits": [x for x in inherits[r] if x != r],
                "capabilities": [{"resource": "tool:*"}, {"resource": "model:*"}],
            }
            for r in _QROLES
        },
        "quotas": {},
    }
    for i, (kind, subject, resources) in enumerate(quotas):
        if (kind == "tenant") != subject.startswith("t") or (kind == "principal") != subject.startswith("p"):
            continue
        quota: dict[str, Any] = {kind: subject, "window_s": 60, "limit": 5}
        if resources is not None:
            quota["resources"] = resources
        doc["quotas"][f"q{i}"] = quota
    try:
        policy = parse_policy(json.dumps(doc))
    except PolicyError as exc:
        assert "cycle" in str(exc)
        return
    index = PolicyIndex(policy)

    def closure(role: str, seen: set[str]) -> None:
        if role not in seen:
            seen.add(role)
            for parent in doc["roles"][role]["inherits"]:
                closure(parent, seen)

    for principal in held:
        roles: set[str] = set()
        for role in held[principal]:
            closure(role, roles)
        for resource in [*(f"tool:{t}" for t in _QTOOLS), "model:m"]:
            action = "invoke" if resource.startswith("tool:") else "generate"
            decision = index.evaluate(principal, Call(resource, action, {}))
            if decision.outcome is not Outcome.ALLOW:
                assert not roles
                continue
            counted = sorted(
                name
                for name, q in doc["quotas"].items()
                if (q.get("tenant") is not None and q["tenant"] == tenants[principal])
                or q.get("principal") == principal
                or q.get("role") in roles
                if any(pattern_matches(p, resource) for p in q.get("resources", ["tool:*", "model:*"]))
            )
            assert sorted(q.name for q in decision.quotas) == counted, (principal, resource)


# --- text no file can hold --------------------------------------------------------------------------


@pytest.mark.parametrize("parser", ["libyaml", "pure-python"])
def test_a_lone_surrogate_in_policy_or_inventory_text_is_a_typed_error(
    parser: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # parse_policy and parse_inventory take str: a lone surrogate (from a JSON "\ud800" escape)
    # raised UnicodeEncodeError from the encoder, or from libyaml, instead of their error.
    if parser == "pure-python":
        monkeypatch.setattr(agentgate._yaml, "_Loader", agentgate._yaml._PureLoader)
    with pytest.raises(PolicyError, match=r"^s\.yaml: not UTF-8 text"):
        parse_policy("version: 1\nname: \ud800\n", source="s.yaml")
    with pytest.raises(InventoryError, match=r"^i\.yaml: .*(not UTF-8 text|unacceptable character)"):
        parse_inventory("version: 1\nname: \ud800\n", source="i.yaml")
    with pytest.raises(PolicyError, match=r"^p\.yaml: .*(not UTF-8 text|unacceptable character)"):
        load_yaml("a: \ud800\n", source="p.yaml")


# --- the command line on the same inputs ---------------------------------------------------------


def test_policy_lint_and_explain_answer_these_inputs_with_their_exit_codes_and_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deep = tmp_path / "deep.yaml"
    deep.write_text("version: 1\nname: " + "{a: " * 990 + "1" + "}" * 990 + "\n", encoding="utf-8")
    assert main(["policy", "lint", str(deep)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "deep.yaml:2:" in err and "nested more than 100 levels" in err
    typo = tmp_path / "typo.yaml"
    typo.write_text(_quota("[tool:payments.refnd]"), encoding="utf-8")
    assert main(["policy", "lint", str(typo)]) == 1
    assert (
        "typo.yaml:17: error: authority_chain_opacity/rule_for_undeclared_resource" in capsys.readouterr().out
    )
    dated = tmp_path / "dated.yaml"
    dated.write_text(
        "description: 2026-01-31\n" + _BASE + "        constraints: {amount: {le: 1.5e3}}\n", encoding="utf-8"
    )
    explain = ["policy", "explain", str(dated), "--as", "bot", "--tool", "payments.refund", "--args"]
    assert main([*explain, '{"amount": 1500}']) == 0
    assert main([*explain, '{"amount": 1501}']) == 1


@pytest.mark.parametrize(
    ("constraint", "expected"),
    [
        ("{le: .nan}", "le: Input should be a finite number (expected a finite number)"),
        ("{in: [1, -.inf]}", "in.1: Input should be a finite number (expected a finite number)"),
        ("{eq: .nan}", "eq: Input should be a finite number (expected a finite number)"),
        ("{in: [~]}", "(expected a string or an integer or a number or true or false)"),
    ],
)
def test_a_value_no_member_of_a_union_takes_is_named_for_what_is_wrong_with_it(
    constraint: str, expected: str
) -> None:
    # A NaN bound was reported as "Input should be a valid integer (and 1 more error) (expected
    # an integer)": the first union member's type mismatch, not what is wrong with the value.
    with pytest.raises(PolicyError) as caught:
        parse_policy(_BASE + f"        constraints: {{amount: {constraint}}}\n", source="u.yaml")
    assert expected in str(caught.value) and "more error" not in str(caught.value)
    assert str(caught.value).startswith("u.yaml:12:")


@pytest.mark.parametrize(
    ("field", "value", "hint"),
    [
        ("ttl_s", "1h", "write a plain number, without a unit"),
        ("ttl_s", "1:30", "write a plain number, without a unit"),
        ("ttl_s", "'600'", "write the value unquoted"),
        ("revocable", "yes", "write true or false (yes, no, on and off are text"),
        ("revocable", "'false'", "write the value unquoted"),
    ],
)
def test_text_where_a_number_or_boolean_belongs_gets_a_hint_that_fits_it(
    field: str, value: str, hint: str
) -> None:
    # Every such value was told "write the value unquoted", also an unquoted `yes` or `1:30`.
    with pytest.raises(PolicyError) as caught:
        parse_policy(f"version: 1\nroles:\n  r:\n    {field}: {value}\n", source="h.yaml")
    assert str(caught.value).startswith("h.yaml:4:") and f"hint: {hint}" in str(caught.value)
