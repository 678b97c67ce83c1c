"""The policy linter (the package agentgate/policy/_lint/): the examples lint clean, every rule reports
located, fixable findings of its own kind, and an approval gate is judged by what it guards (a gate
on a model call or a declared argument is no error, a gate on an undeclared resource is told what
to name, a rule's bounds decide whether a sibling tool is a path around the gate)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_policy_lint_bypass_siblings import _findings as _lint_findings
from test_policy_load import ALICE, BOT, HEAD, ROOT, WORKER, _codes

from agentgate.findings import Finding, FindingKind, Severity
from agentgate.keys import SigningKey
from agentgate.policy import RULES, lint, load_policy, parse_policy

POLICIES = Path(__file__).resolve().parents[1] / "policies"
DID = "did:key:z6MkqQP5oTUxZ95rgbJg29FwyrJ5N8HrRPpEBQbPrAUCkPXm"


@pytest.mark.parametrize("name", ["support.yaml", "research_team.yaml", "gpu_platform.yaml"])
def test_examples_lint_clean(name: str) -> None:
    assert lint(load_policy(POLICIES / name)) == ()


def test_rules_have_unique_codes_and_cover_the_four_kinds() -> None:
    codes = [rule.code for rule in RULES]
    assert len(codes) == len(set(codes))
    assert {rule.kind for rule in RULES} == set(FindingKind)
    assert all(rule.hint for rule in RULES)


def test_docs_explain_every_code() -> None:
    text = (POLICIES.parent / "docs" / "lint.md").read_text()
    missing = [rule.code for rule in RULES if f"`{rule.code}`" not in text]
    assert not missing


def test_finding_names_file_line_and_fix() -> None:
    text = f"""version: 1
principals:
  bot: {{kind: agent, did: {DID}, roles: [worker]}}
tools:
  payments.refund: {{args: {{amount: {{type: number}}}}}}
roles:
  worker:
    capabilities:
      - resource: tool:payments.refund
        constraints: {{amount: {{le: 100}}}}
    ttl_s: 600
    delegation:
      max_depth: 1
      max_ttl_s: 60
      capabilities:
        - resource: tool:payments.refund
          constraints: {{amount: {{le: 1000}}}}
"""
    (finding,) = lint(parse_policy(text, source="p.yaml"))
    assert finding.kind is FindingKind.SCOPE_CREEP and finding.code == "delegation_wider_than_role"
    assert (finding.file, finding.line) == ("p.yaml", 16) and finding.hint
    assert finding.severity is Severity.ERROR
    assert "amount" in finding.message  # the witness: a call the child allows and the role does not


def test_the_typo_that_other_tools_miss_is_an_error() -> None:
    # A misspelled argument makes a rule that never matches; it must not load silently and lint clean.
    text = f"""version: 1
principals:
  bot: {{kind: agent, did: {DID}, roles: [worker]}}
tools:
  run_shell: {{args: {{cmd: {{type: string}}}}}}
roles:
  worker:
    capabilities:
      - resource: tool:run_shell
        constraints: {{comand: {{prefix: "ls "}}}}
    ttl_s: 600
"""
    codes = {f.code: f.severity for f in lint(parse_policy(text, source="p.yaml"))}
    assert codes == {"constraint_on_undeclared_argument": Severity.ERROR}


def _big_policy(n: int) -> str:
    tools = "".join(f"  t{i}.run: {{args: {{amount: {{type: number}}}}}}\n" for i in range(n))
    rules = "".join(
        f"      - {{resource: 'tool:t{i}.run', constraints: {{amount: {{le: {i + 1}}}}}}}\n" for i in range(n)
    )
    return (
        f"version: 1\nprincipals:\n  svc: {{kind: service, did: {DID}, roles: [r]}}\n"
        f"tools:\n{tools}roles:\n  r:\n    ttl_s: 600\n    capabilities:\n{rules}"
    )


def test_large_policy_lints_clean_and_finds_a_planted_shadow() -> None:
    text = _big_policy(1000)
    assert lint(parse_policy(text)) == ()
    planted = text + "      - {resource: 'tool:t5.run', constraints: {amount: {le: 1}}}\n"
    assert [f.code for f in lint(parse_policy(planted))] == ["shadowed_rule"]


# --- one rule each, on a small policy (agent bot, approvers alice and bob) --------------------------


def test_a_delegated_budget_in_another_unit_is_an_error() -> None:
    """Kills: ``delegated_budget_above_role`` comparing only the limits, not the units.

    A role with 1,000 micro-dollars that delegates 10 ``calls`` delegates a budget in a unit it
    does not hold: an error finding."""
    text = (
        HEAD
        + WORKER
        + (
            "    budget: {limit: 1000}\n    delegation:\n      max_ttl_s: 60\n"
            "      capabilities: [{resource: 'tool:payments.refund', constraints: {amount: {le: 10}}}]\n"
            "      budget: {limit: 10, unit: calls}\n"
        )
    )
    assert "delegated_budget_above_role" in _codes(text)


@pytest.mark.parametrize(("delegated", "flagged"), [(1000, False), (1001, True)])
def test_a_delegated_budget_one_above_the_role_is_an_error(delegated: int, flagged: bool) -> None:
    """Kills: ``delegated_budget_above_role`` comparing with an off-by-one (``> limit + 1``).

    A delegated budget equal to the role's is fine; one micro-dollar above it is scope creep."""
    text = (
        HEAD
        + WORKER
        + "    budget: {limit: 1000}\n    delegation:\n      max_ttl_s: 60\n"
        + "      capabilities: [{resource: 'tool:payments.refund', constraints: {amount: {le: 10}}}]\n"
        + f"      budget: {{limit: {delegated}}}\n"
    )
    assert ("delegated_budget_above_role" in _codes(text)) is flagged


@pytest.mark.parametrize(
    ("depth", "flagged"), [("", True), ("      max_depth: 1\n", True), ("      max_depth: 0\n", False)]
)
def test_a_delegation_one_step_deep_without_a_ttl_is_an_error(depth: str, flagged: bool) -> None:
    """Kills: ``delegation_without_ttl`` firing only from ``max_depth`` 2 (``> 1`` for ``> 0``).

    The default delegation (one step) with no ``max_ttl_s`` lets a sub-agent's grant live as long
    as the role's: an error; ``max_depth: 0`` delegates nothing and is not flagged."""
    text = HEAD + WORKER + "    delegation:\n" + depth + "      capabilities: []\n"
    assert ("delegation_without_ttl" in _codes(text)) is flagged


@pytest.mark.parametrize(("ttl", "flagged"), [(600, False), (601, True)])
def test_a_role_ttl_one_second_above_the_policy_max_is_an_error(ttl: int, flagged: bool) -> None:
    """Kills: ``ttl_above_policy_max`` comparing with an off-by-one (``> max + 1``).

    ``settings.max_ttl_s`` is the most any grant may live: one second more is an error."""
    text = HEAD + "settings: {max_ttl_s: 600}\n" + WORKER.replace("ttl_s: 600", f"ttl_s: {ttl}")
    assert ("ttl_above_policy_max" in _codes(text)) is flagged


def test_every_delegated_capability_is_checked() -> None:
    """Kills: the compiler keeping only the first of a delegation's capabilities.

    The second entry of ``delegation.capabilities`` (a tool the role does not hold) is found."""
    text = (
        HEAD
        + "  other.tool: {}\n"
        + WORKER
        + "    delegation:\n      max_ttl_s: 60\n      capabilities:\n"
        + "        - {resource: 'tool:payments.refund', constraints: {amount: {le: 10}}}\n"
        + "        - {resource: 'tool:other.tool'}\n"
    )
    assert "delegates_unheld_capability" in _codes(text)


def test_an_agent_role_is_every_role_an_agent_holds() -> None:
    """Kills: ``agent_roles`` built from each agent principal's first role only, and
    ``agent_inherits_role`` looking at ``kind: agent`` only.

    A role held by an agent (second in its list, no ``kind``) that grants ``tool:*`` and inherits
    is still an agent role: both findings are reported."""
    text = (
        HEAD.replace("roles: [worker]", "roles: [worker, wide]")
        + WORKER
        + "  base:\n    capabilities: []\n"
        + "  wide:\n    inherits: [base]\n    capabilities: [{resource: 'tool:*'}]\n    ttl_s: 60\n"
    )
    codes = _codes(text)
    assert "wildcard_capability_for_agent" in codes and "agent_inherits_role" in codes


def test_a_model_wildcard_for_an_agent_is_an_error() -> None:
    """Kills: the wildcard rule's error case narrowed to ``tool:*``.

    ``model:*`` held by an agent is every model: an error, as ``tool:*`` is."""
    text = (
        HEAD
        + "models:\n  m1: {cost_per_mtok: {input: 1, output: 1}}\n"
        + WORKER
        + "  wide:\n    kind: agent\n    capabilities: [{resource: 'model:*'}]\n    ttl_s: 60\n"
    )
    findings = [f for f in lint(parse_policy(text)) if f.code == "wildcard_capability_for_agent"]
    assert findings and findings[0].severity.value == "error"


def test_an_agent_holding_a_trust_anchor_key_is_an_error() -> None:
    """Kills: the check that an agent principal does not hold a trust anchor's key dropped.

    An agent with the root key can issue itself any root grant: ``principal_without_key``
    names the anchor, as an error."""
    text = HEAD.replace(f"did: {BOT}", f"did: {ROOT}") + WORKER
    findings = [f for f in lint(parse_policy(text)) if "holds the key of trust anchor root" in f.message]
    assert findings and findings[0].code == "principal_without_key"
    assert findings[0].severity.value == "error"


def test_findings_are_ordered_by_line() -> None:
    """Kills: ``lint`` returning findings in rule order instead of sorted by line.

    The report reads top to bottom with the file."""
    text = HEAD.replace("args:", "audit: false\n    args:") + "settings: {revocation: false}\n" + WORKER
    lines = [f.line or 0 for f in lint(parse_policy(text))]
    assert len(lines) >= 2 and lines == sorted(lines)


# --- one rule each, on a small policy (service svc, approver alice) -------------------------------


SVC = "did:key:z6Mkn6co2nAe6kgBR8cNPwkVv7k6U393ZCNwQcMtXk9mB1gj"
SVC_HEAD = f"""version: 1
trust_anchors:
  root: {{did: {ROOT}}}
principals:
  svc: {{kind: service, did: {SVC}, roles: [r]}}
  alice: {{kind: human, did: {ALICE}}}
tools:
  pay.refund: {{args: {{amount: {{type: integer}}, note: {{type: string}}}}}}
  pay.void: {{args: {{amount: {{type: integer}}}}}}
"""


def _findings(body: str, code: str, head: str = SVC_HEAD) -> list[Finding]:
    return [f for f in lint(parse_policy(head + body, source="p.yaml")) if f.code == code]


def _role(extra: str = "", rule: str = '{resource: "tool:pay.refund"}') -> str:
    return f"roles:\n  r:\n    capabilities: [{rule}]\n    ttl_s: 600\n{extra}"


@pytest.mark.parametrize(
    ("constraint", "found"),
    [
        ("{gt: 1, lt: 2}", True),  # no whole number between: never matches an integer
        ("{gt: 1, le: 2}", False),
        ("{ge: 1, lt: 2}", False),
        ("{gt: 1.5, lt: 2}", True),
        ("{gt: 1.5, lt: 2.5}", False),
        ('{eq: "5"}', True),  # text, for an integer argument
        ("{in: [1.5, 2.5]}", True),  # no whole number listed
        ("{in: [1.5, 2]}", False),
        ('{prefix: "1"}', True),  # a prefix admits text only
    ],
)
def test_an_integer_constraint_that_admits_no_integer_is_a_type_mismatch(
    constraint: str, found: bool
) -> None:
    """Mutants: the least integer above ``gt`` was ``ceil(gt)`` (1 for ``gt: 1``), the greatest
    below ``lt`` was ``floor(lt)`` (2 for ``lt: 2``); every value "fitted" an integer; a prefix
    on an integer was accepted. Each made the linter silent on a rule that can never match.

    Rule: a constraint on an integer argument that no whole number satisfies is reported, and
    one that some whole number satisfies is not."""
    body = _role(rule=f'{{resource: "tool:pay.refund", constraints: {{amount: {constraint}}}}}')
    assert bool(_findings(body, "constraint_type_mismatch")) is found


def test_a_wildcard_gate_reports_each_tool_lacking_the_argument_it_looks_at() -> None:
    """Mutant: only the first tool a wildcard gate names was checked for the arguments its
    ``when`` looks at.

    Rule: a gate's condition on an argument one of its tools does not declare is reported for
    that tool, wherever it comes in the declaration order."""
    body = _role() + (
        "approvals:\n  big:\n    resource: tool:pay.*\n    when: {note: {prefix: x}}\n    approvers: [alice]\n"
    )
    found = _findings(body, "gate_on_undeclared_argument")
    assert [f.message for f in found] == [
        "approval gate big looks at note, which tool:pay.void does not declare"
    ]


def test_a_role_inheriting_a_budgeted_role_directly_is_told_it_has_no_budget() -> None:
    """Mutant: the roles searched for a budget skipped the role's first parent (``closure[2:]``).

    Rule: a role that inherits the rules of a role with a budget, and has none itself, is warned."""
    body = (
        "roles:\n  r:\n    inherits: [base]\n    ttl_s: 600\n"
        '  base:\n    capabilities: [{resource: "tool:pay.refund"}]\n    budget: {limit: 10, unit: calls}\n    ttl_s: 600\n'
    )
    found = _findings(body, "inherits_rules_not_budget")
    assert len(found) == 1 and "holds the rules of base but no budget" in found[0].message


def test_a_role_two_steps_from_the_rules_it_inherits_needs_a_ttl() -> None:
    """Mutants: ``role_without_ttl`` asked only for a role's own rules, or followed inheritance
    one step only, so a role that inherits (through another) every rule it holds had no TTL and
    no finding.

    Rule: every role that holds a rule, its own or one inherited at any depth, must have ttl_s."""
    body = (
        "roles:\n  r:\n    inherits: [mid]\n"
        "  mid:\n    inherits: [base]\n    ttl_s: 600\n"
        '  base:\n    capabilities: [{resource: "tool:pay.refund"}]\n    ttl_s: 600\n'
        "  empty: {}\n"
    )
    found = _findings(body, "role_without_ttl")
    assert [f.message for f in found] == ["role r has no ttl_s"]


def test_an_agent_holding_every_model_is_an_error() -> None:
    """Mutant: only ``tool:*`` was taken for a whole-kind wildcard, so ``model:*`` for an agent
    went unreported (or was a mere warning).

    Rule: an agent role holding every resource of a kind (``tool:*``, ``model:*``) is an error."""
    head = (
        SVC_HEAD.replace("kind: service", "kind: agent")
        + "models:\n  m1: {cost_per_mtok: {input: 1, output: 1}}\n"
    )
    for pattern in ("tool:*", "model:*"):
        found = _findings(_role(rule=f'{{resource: "{pattern}"}}'), "wildcard_capability_for_agent", head)
        assert len(found) == 1 and found[0].severity.value == "error", pattern


def test_an_agent_holding_a_trust_anchor_key_is_reported() -> None:
    """Mutant: the check for an agent principal holding a trust anchor's key was dropped.

    Rule: an agent with an anchor's key can issue itself any root grant: always an error."""
    head = SVC_HEAD.replace(f"svc: {{kind: service, did: {SVC}", f"svc: {{kind: agent, did: {ROOT}")
    found = _findings(_role(), "principal_without_key", head)
    assert any("holds the key of trust anchor root" in f.message for f in found)
    assert _findings(_role(), "principal_without_key") == []


@pytest.mark.parametrize(
    ("delegation", "code"),
    [
        ("{max_depth: 1, max_ttl_s: 60, budget: {limit: 5, unit: tokens}}", "delegated_budget_above_role"),
        ("{max_depth: 1}", "delegation_without_ttl"),
        ("{max_depth: 1, max_ttl_s: 900}", "delegated_ttl_above_delegator"),
    ],
)
def test_a_delegation_that_escapes_its_role_is_reported(delegation: str, code: str) -> None:
    """Mutants: a delegated budget in another unit than the role's passed (only the limits were
    compared); a delegation of depth 1 without max_ttl_s passed (``max_depth > 1``); a delegated
    grant living up to twice the role's TTL passed.

    Rule: a delegation may hand on no budget in a unit the role is not metered in, no grant
    without a life limit, and no grant outliving the delegator's."""
    extra = f"    budget: {{limit: 100, unit: calls}}\n    delegation: {delegation}\n"
    assert len(_findings(_role(extra), code)) == 1
    safe = "    budget: {limit: 100, unit: calls}\n    delegation: {max_depth: 1, max_ttl_s: 600, budget: {limit: 100, unit: calls}}\n"
    assert _findings(_role(safe), code) == []


def test_an_unaudited_tool_a_keyless_anchor_and_a_gate_no_value_meets_are_reported() -> None:
    """Mutants: ``tool_not_audited``, ``trust_anchor_without_key`` or the gate half of
    ``contradictory_constraint`` never reported.

    Rule: each of these policies is reported by its own code."""
    unaudited = SVC_HEAD.replace("pay.void: {args:", "pay.void: {audit: false, args:")
    assert len(_findings(_role(), "tool_not_audited", unaudited)) == 1
    keyless = SVC_HEAD.replace(f"root: {{did: {ROOT}}}", "root: {}")
    assert len(_findings(_role(), "trust_anchor_without_key", keyless)) == 1
    gate = "approvals:\n  g:\n    resource: tool:pay.refund\n    when: {amount: {gt: 5, lt: 3}}\n    approvers: [alice]\n"
    assert len(_findings(_role() + gate, "contradictory_constraint")) == 1


def test_a_quota_on_a_misspelt_tool_is_an_error() -> None:
    """Mutant: a quota counting an exact resource that is not declared went unreported.

    Rule: a quota that names an undeclared tool counts nothing, so the calls it was written to
    limit run without limit: an error on the quota's line."""
    quota = "quotas:\n  q:\n    principal: svc\n    window_s: 60\n    limit: 5\n    resources: [{0}]\n"
    found = _findings(_role() + quota.format("tool:pay.refnud"), "rule_for_undeclared_resource")
    assert len(found) == 1 and "quota q counts tool:pay.refnud" in found[0].message
    assert _findings(_role() + quota.format("tool:pay.refund"), "rule_for_undeclared_resource") == []


@pytest.mark.parametrize(
    ("unit", "resources", "severity"),
    [
        ("tokens", "[tool:pay.refund]", Severity.ERROR),  # a tool call costs one call, no tokens
        ("usd_micros", '["tool:*"]', Severity.ERROR),  # nor money
        ("usd_micros", '["gpu:h100"]', Severity.ERROR),  # an unpriced GPU type leases free
        ("tokens", '["gpu:a100"]', Severity.ERROR),  # a priced lease costs money, no tokens
        ("calls", "[]", Severity.ERROR),  # no resources: nothing at all
        ("tokens", '["model:*", "tool:*"]', Severity.WARNING),  # the model calls are counted
        ("usd_micros", '["tool:pay.refund", "gpu:a100"]', Severity.WARNING),
        ("usd_micros", '["gpu:*"]', None),  # gpu:a100 is priced
        ("tokens", '["model:*"]', None),
        ("calls", '["tool:pay.refund"]', None),
        ("usd_micros", None, None),  # the default (tool:*, model:*) is no choice of the author's
    ],
)
def test_a_quota_in_a_unit_its_resources_never_cost_is_reported(
    unit: str, resources: str | None, severity: Severity | None
) -> None:
    """Mutant: quotas were checked for misspelt resources only.

    Rule: the Gate charges a quota what a call costs in the quota's unit, and a tool call costs one
    call and nothing else, a GPU lease money only for a type priced under ``gpus``. A quota in
    ``tokens`` on tools counts nothing: the calls it was written to limit ran without limit and
    lint said nothing. Such a quota is an error on its line; one pattern of it that can add nothing
    is a warning."""
    listed = f"    resources: {resources}\n" if resources is not None else ""
    quota = f"quotas:\n  q:\n    principal: svc\n    window_s: 60\n    limit: 5\n    unit: {unit}\n{listed}"
    head = (
        SVC_HEAD
        + "models:\n  m: {cost_per_mtok: {input: 1, output: 1}}\ngpus:\n  a100: {cost_per_gpu_hour: 5}\n"
    )
    found = _findings(_role() + quota, "quota_counts_nothing", head)
    if severity is None:
        assert found == []
        return
    (finding,) = found
    assert finding.severity is severity and finding.kind is FindingKind.AUTHORITY_CHAIN_OPACITY
    assert finding.line == 23 + (severity is Severity.WARNING or resources == "[]")  # unit, resources
    assert "quota q" in finding.message and finding.hint


@pytest.mark.parametrize(
    ("approvers", "flagged"),
    [("[bot2]", 1), ("[alice, bot2, bot2]", 1), ("[alice]", 0), ("[svc]", 0)],
)
def test_an_agent_named_as_an_approver_is_reported(approvers: str, flagged: int) -> None:
    """Mutant: no rule looked at who approves.

    Rule: an approval gate asks a person to sign off; an agent (``kind: agent``) named as an
    approver signs approvals the Gate counts, so one agent's risky call is let through by
    another agent's decision. An error at the approver's line, once per agent (a service, an
    automated approver its operators run, is not reported)."""
    bot2 = SigningKey(b"\x0b" * 32).did
    head = SVC_HEAD.replace("principals:\n", f"principals:\n  bot2: {{kind: agent, did: {bot2}}}\n")
    gate = f"approvals:\n  g:\n    resource: tool:pay.refund\n    approvers: {approvers}\n"
    found = _findings(_role() + gate, "agent_approves", head)
    assert [f.line for f in found] == [18] * flagged
    assert all(f.kind is FindingKind.IMPLICIT_TRUST_INHERITANCE and "agent bot2" in f.message for f in found)


def test_delegating_another_action_than_the_role_holds_is_reported() -> None:
    """Mutant: the action of a delegated capability was taken as held whatever it was (only the
    resource was compared).

    Rule: a role may delegate only an action it holds on that resource (or one under ``*``)."""
    extra = '    delegation: {max_ttl_s: 60, capabilities: [{resource: "tool:pay.refund", action: admin}]}\n'
    found = _findings(_role(extra), "delegates_unheld_capability")
    assert len(found) == 1 and "which it does not hold" in found[0].message
    held = _role(extra, rule='{resource: "tool:pay.refund", action: "*"}')
    assert _findings(held, "delegates_unheld_capability") == []


# --- approval gates: model calls, undeclared resources, bounds that close a path around a gate ----


def test_an_approval_gate_on_a_model_call_is_no_lint_error() -> None:
    """docs/gateway.md ("Calls behind an approval gate") puts a model call behind a gate on
    `max_tokens`, and the Gate and the gateway enforce it; `policy lint` called that policy broken
    (gate_on_undeclared_argument: "guards model:..., which names no declared tool", exit 1)."""
    from agentgate.policy import lint

    policy = parse_policy(
        """
version: 1
trust_anchors: {root: {did: did:key:z6MkqQP5oTUxZ95rgbJg29FwyrJ5N8HrRPpEBQbPrAUCkPXm}}
principals:
  bot: {kind: service, did: did:key:z6Mkn6co2nAe6kgBR8cNPwkVv7k6U393ZCNwQcMtXk9mB1gj, roles: [chat]}
  lead: {kind: human, did: did:key:z6Mktk1iFd7YoyEirJoqYtcfNUtMa5nUhqkrQsgX9tmc5Npj}
models:
  qwen3-32b: {cost_per_mtok: {input: 1, output: 1}}
roles:
  chat:
    capabilities: [{resource: "model:qwen3-32b", constraints: {max_tokens: {le: 4096}}}]
    ttl_s: 600
approvals:
  long-answers:
    resource: model:qwen3-32b
    when: {max_tokens: {gt: 100}}
    approvers: [lead]
""",
        source="gated-model.yaml",
    )
    assert [f.code for f in lint(policy)] == []


@pytest.mark.parametrize(
    ("resource", "hint"),
    [
        ("model:other", "make the gate's resource name a model declared under models:"),
        ("tool:other", "make the gate's resource name a tool declared under tools:"),
    ],
)
def test_a_gate_on_an_undeclared_resource_is_told_what_to_name(resource: str, hint: str) -> None:
    """R47 (docs helper): the lint hint said "name an argument the guarded tool declares" for a
    gate on an undeclared model too."""
    from agentgate.policy import lint, parse_policy

    policy = parse_policy(
        f"""
version: 1
trust_anchors: {{root: {{did: did:key:z6MkqQP5oTUxZ95rgbJg29FwyrJ5N8HrRPpEBQbPrAUCkPXm}}}}
principals:
  bot: {{kind: service, did: did:key:z6Mkn6co2nAe6kgBR8cNPwkVv7k6U393ZCNwQcMtXk9mB1gj, roles: [chat]}}
  lead: {{kind: human, did: did:key:z6Mktk1iFd7YoyEirJoqYtcfNUtMa5nUhqkrQsgX9tmc5Npj}}
models:
  qwen3-32b: {{cost_per_mtok: {{input: 1, output: 1}}}}
roles:
  chat:
    capabilities: [{{resource: "model:qwen3-32b", constraints: {{max_tokens: {{le: 4096}}}}}}]
    ttl_s: 600
approvals:
  long-answers:
    resource: {resource}
    when: {{max_tokens: {{gt: 100}}}}
    approvers: [lead]
""",
        source="gated.yaml",
    )
    found = [f for f in lint(policy) if f.code == "gate_on_undeclared_argument"]
    assert [f.hint for f in found] == [hint]


def test_a_listed_value_the_rules_bounds_exclude_opens_no_path_around_a_gate() -> None:
    """Kills R48 lintkeys' l38 (``_of_type`` keeping every listed value, ``constraint.allows``
    dropped): a wildcard rule allowing ``amount in [100, 900]`` and ``<= 500`` reaches the gated
    tool's sibling with 100 only, under the gate's ``> 500``: no ``approval_gate_bypass``; without
    the bound, 900 is a path around it."""
    body = """tools:
  payments.refund:
    args: {order_id: {type: string, required: true}, amount: {type: integer, required: true}}
  payments.refund_partial:
    args: {order_id: {type: string, required: true}, amount: {type: integer, required: true}}
roles:
  r:
    capabilities:
      - {resource: "tool:payments.*", constraints: {amount: {in: [100, 900], le: 500}}}
    ttl_s: 600
approvals:
  large-refund:
    resource: tool:payments.refund
    when: {amount: {gt: 500}}
    approvers: [alice]
"""
    assert _lint_findings(body, "approval_gate_bypass") == []
    found = _lint_findings(body.replace("in: [100, 900], le: 500", "in: [100, 900]"), "approval_gate_bypass")
    assert [f.code for f in found] == ["approval_gate_bypass"]


@pytest.mark.parametrize(
    ("rule", "gate", "bypass"),
    [
        ("{gt: 1.0e300}", "{gt: 500}", True),
        ("{ge: 1.0e19}", "{lt: 1.0e19}", False),
        ("{gt: 9223372036854775807}", "{lt: 9.223372036854776e18}", False),
        ("{gt: 9223372036854775807}", "{le: 9.223372036854776e18}", True),
        ("{le: -1.0e300}", "{ge: -1.0e301}", True),
        ("{le: -1.0e300}", "{gt: -1.0e300}", False),
    ],
)
def test_a_float_bound_past_2_63_on_an_integer_argument_is_linted_exactly(
    rule: str, gate: str, bypass: bool
) -> None:
    """Review R55: the integers a bound past 2**63 admits no longer fit a Constraint; lint keeps
    the float bound there, and still finds exactly the calls the rule lets around the gate."""
    body = f"""tools:
  payments.refund:
    args: {{amount: {{type: integer, required: true}}}}
  payments.refund_partial:
    args: {{amount: {{type: integer, required: true}}}}
roles:
  r:
    capabilities:
      - {{resource: "tool:payments.*", constraints: {{amount: {rule}}}}}
    ttl_s: 600
approvals:
  large-refund:
    resource: tool:payments.refund
    when: {{amount: {gate}}}
    approvers: [alice]
"""
    found = _lint_findings(body, "approval_gate_bypass")
    assert [f.code for f in found] == (["approval_gate_bypass"] if bypass else [])
