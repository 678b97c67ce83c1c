"""Lint rules on what a policy declares and names (authority_chain_opacity): a tool no role can
call or that is not audited, a rule or a quota that names an undeclared resource, a quota that
counts nothing (no resources, or a unit none of their calls use), a role or delegation budget in a
unit none of the calls it is charged for use, and a loggable argument a tool does not declare.
"""

from __future__ import annotations

from collections.abc import Iterator
from collections.abc import Set as AbstractSet

from agentgate.findings import Finding, Severity
from agentgate.policy._index import wild_ancestors
from agentgate.policy._lint._common import OPAQUE, LintRule, _declared, _listed, _named_patterns
from agentgate.policy._load import Policy, RuleRef


class ToolWithoutRule(LintRule):
    code = "tool_without_rule"
    kind = OPAQUE
    severity = Severity.WARNING
    hint = "grant the tool to a role, or remove its declaration"

    def check(self, policy: Policy) -> Iterator[Finding]:
        exact = {r.capability.resource for rules in policy.rules.values() for r in rules}
        wild = {p for p in exact if p.endswith("*")}
        for name in policy.document.tools:
            resource = f"tool:{name}"
            if resource not in exact and not any(p in wild for p in wild_ancestors(resource)):
                yield self.finding(
                    policy, f"no role can call {resource}", policy.line_of("tools", name, key=True)
                )


class RuleForUndeclaredResource(LintRule):
    code = "rule_for_undeclared_resource"
    kind = OPAQUE
    hint = "check the spelling against the tools and models sections, or declare the tool"

    def check(self, policy: Policy) -> Iterator[Finding]:
        declared = _declared(policy)
        known = set(declared)
        named = _named_patterns(declared)
        for rules in (*policy.rules.values(), *policy.delegable.values()):
            for rule in rules:
                pattern = rule.capability.resource
                if pattern.startswith("gpu:"):
                    continue
                if pattern.endswith("*"):
                    if pattern not in named:
                        yield self.finding(
                            policy,
                            f"{rule} names no declared tool or model",
                            rule.line,
                            severity=Severity.WARNING,
                        )
                elif pattern not in known:
                    yield self.finding(
                        policy,
                        f"{rule} names {pattern}, which is not declared: it can never match",
                        rule.line,
                    )
        # A quota on a misspelt resource counts nothing: the calls it was written to limit run
        # without limit, and the policy reads as if they were limited.
        for name, quota in policy.document.quotas.items():
            if "resources" not in quota.model_fields_set:
                continue  # the default (tool:*, model:*) names whatever is declared
            for i, pattern in enumerate(quota.resources):
                if pattern.startswith("gpu:"):
                    continue
                line = policy.line_of("quotas", name, "resources", i)
                if pattern.endswith("*"):
                    if pattern not in named:
                        yield self.finding(
                            policy,
                            f"quota {name} counts {pattern}, which names no declared tool or model",
                            line,
                            severity=Severity.WARNING,
                        )
                elif pattern not in known:
                    yield self.finding(
                        policy,
                        f"quota {name} counts {pattern}, which is not declared: it counts nothing, "
                        "and the calls it was written to limit run without it",
                        line,
                    )


class QuotaCountsNothing(LintRule):
    code = "quota_counts_nothing"
    kind = OPAQUE
    hint = (
        "count resources whose calls use the quota's unit (tokens: models; usd_micros: models and "
        "GPU types priced under gpus), or count calls"
    )

    def check(self, policy: Policy) -> Iterator[Finding]:
        # The Gate charges a quota what the call costs in the quota's unit (gate/_costs.py): a
        # tool call costs one call and nothing else, a lease money only for a GPU type priced
        # under gpus. A quota in a unit none of its resources' calls use counts nothing: the
        # calls it was written to limit run without limit, and the policy reads as if they were.
        priced = _priced_patterns(policy)
        for name, quota in policy.document.quotas.items():
            if not quota.resources:
                yield self.finding(
                    policy,
                    f"quota {name} lists no resources: it counts nothing",
                    policy.line_of("quotas", name, "resources"),
                )
                continue
            # Each entry with its own position: looking a dead entry up again (``index``) was
            # quadratic in them, and put a repeated entry's finding on its first line.
            dead = [(at, p) for at, p in enumerate(quota.resources) if not _costs_in(quota.unit, p, priced)]
            if len(dead) == len(quota.resources):
                yield self.finding(
                    policy,
                    f"quota {name} counts {quota.unit}, which no call on {', '.join(quota.resources)} uses: "
                    "it counts nothing, and the calls it was written to limit run without it",
                    policy.line_of("quotas", name, "unit"),
                )
                continue
            if "resources" not in quota.model_fields_set:
                continue  # the default (tool:*, model:*) counts what the unit can, not a choice made here
            for at, pattern in dead:
                yield self.finding(
                    policy,
                    f"quota {name} counts {quota.unit}, which calls on {pattern} do not use: the entry counts nothing",
                    policy.line_of("quotas", name, "resources", at),
                    severity=Severity.WARNING,
                )


class BudgetCountsNothing(LintRule):
    code = "budget_counts_nothing"
    kind = OPAQUE
    hint = (
        "budget the unit the role's calls cost (calls: every call; tokens: models; usd_micros: models "
        "and GPU types priced under gpus), or drop the budget"
    )

    def check(self, policy: Policy) -> Iterator[Finding]:
        # The same cost model as ``quota_counts_nothing``: a grant for a role carries the role's
        # budget, and a call on it is charged what it costs in the budget's unit. A role whose
        # rules (its own and those it inherits, decided as it: ``held_role``) name only tools,
        # budgeted in ``usd_micros`` (the unit's default) or ``tokens``, is charged nothing: its
        # grants spend without limit while the policy reads as if capped. Likewise a
        # delegation's budget, against what the delegation hands on. Until review R96 lint said
        # nothing, and policies/support.yaml capped a tools-only agent at 50 USD it never spent.
        # A ``calls`` budget counts every call, so its role's rules are not gathered (a role
        # inheriting a common role of thousands of rules, thousands of times, made lint 10 times
        # slower: the R96 regression review).
        priced = _priced_patterns(policy)
        for name, role in policy.document.roles.items():
            bounds: list[tuple[str, tuple[RuleRef, ...], tuple[str, ...], str, str]] = []
            if role.budget is not None and role.budget.unit != "calls":
                bounds.append(
                    (role.budget.unit, policy.effective_rules(name), ("budget",), "budget", "its rules allow")
                )
            if (
                role.delegation is not None
                and role.delegation.budget is not None
                and role.delegation.budget.unit != "calls"
            ):
                bounds.append(
                    (
                        role.delegation.budget.unit,
                        policy.delegable.get(name, ()),
                        ("delegation", "budget"),
                        "delegation budget",
                        "it may delegate",
                    )
                )
            for unit, rules, at, what, calls in bounds:
                patterns = list(dict.fromkeys(r.capability.resource for r in rules))
                if patterns and not any(_costs_in(unit, p, priced) for p in patterns):
                    yield self.finding(
                        policy,
                        f"role {name}'s {what} is in {unit}, which no call {calls} ({_listed(patterns)}) "
                        "costs: it limits nothing, and the grants it bounds spend without limit",
                        policy.line_of("roles", name, *at, key=True),
                    )


def _priced_patterns(policy: Policy) -> frozenset[str]:
    """The GPU types ``policy`` prices (``cost_per_gpu_hour`` above 0) and every wildcard pattern
    that names one: what ``_costs_in`` looks a pattern up in for ``usd_micros``."""
    priced_gpus = [f"gpu:{n}" for n, gpu in policy.document.gpus.items() if gpu.cost_per_gpu_hour > 0]
    return frozenset(priced_gpus) | _named_patterns(priced_gpus)  # looked up, not matched in turn


def _costs_in(unit: str, pattern: str, priced: AbstractSet[str]) -> bool:
    """Whether a call on a resource ``pattern`` names can cost something in ``unit``; ``priced``:
    the priced GPU types and every wildcard pattern that names one (``_named_patterns``), so that
    a quota's entry is one lookup, not a match against every GPU type (2,000 quotas on 2,000
    priced types took 1.4 s)."""
    if unit == "calls":
        return True
    if pattern.startswith("model:"):
        return True
    return unit == "usd_micros" and pattern in priced


class ToolNotAudited(LintRule):
    code = "tool_not_audited"
    kind = OPAQUE
    hint = "remove 'audit: false'; arguments are digested, and 'loggable' chooses what is kept in clear"

    def check(self, policy: Policy) -> Iterator[Finding]:
        for name, tool in policy.document.tools.items():
            if not tool.audit:
                yield self.finding(
                    policy,
                    f"tool:{name} asks that its calls not be audited; agentgate audits every call",
                    policy.line_of("tools", name, "audit"),
                )


class LoggableUndeclaredArgument(LintRule):
    code = "loggable_undeclared_argument"
    kind = OPAQUE
    severity = Severity.WARNING
    hint = "name the argument as the tool declares it under args, or remove it from loggable"

    def check(self, policy: Policy) -> Iterator[Finding]:
        # A call with an argument its tool does not declare is denied, so a loggable name that is
        # no declared argument is never written in clear: a typo (``ammount``) leaves the argument
        # meant digested while the policy reads as if it were kept. Until review R60 lint said
        # nothing.
        for name, tool in policy.document.tools.items():
            for i, arg in enumerate(tool.loggable):
                if arg not in tool.args:
                    yield self.finding(
                        policy,
                        f"tool:{name} marks {arg!r} loggable, which it does not declare: a call "
                        "with it is denied, so it is never written in clear",
                        policy.line_of("tools", name, "loggable", i),
                    )
