"""Static lint: the four failure states of an authority boundary, found before anything runs.

Each check is one small rule object with a ``code``, a ``kind`` and a ``severity``; ``RULES``
lists them all, and adding a check is adding one class to that list. A rule reads the compiled
``Policy`` and yields findings that name the file and line and say how to fix it. docs/lint.md
explains every code.

Where each part lives (private modules: import ``lint``, ``RULES`` and ``LintRule`` from this
package): the rules on what a role may delegate (``_delegation``), on approval gates and the paths
around them (``_approvals``), on principals, keys and roles (``_principals``), on a grant's time
to live and its revocation (``_lifetime``), on what the policy declares and names
(``_declarations``), on how it names them (``_names``), and on constraints and shadowed rules (``_constraints``); the ``LintRule``
base and the lookups several of them make, in ``_common``.
"""

from __future__ import annotations

from agentgate.errors import PolicyError
from agentgate.findings import Finding
from agentgate.policy._lint._approvals import (
    AgentApproves,
    ApprovalGateBypass,
    ApprovalUnreachable,
    ApproverListedTwice,
    GateOnUndeclaredArgument,
)
from agentgate.policy._lint._common import LintRule
from agentgate.policy._lint._constraints import (
    ConstraintOnUndeclaredArgument,
    ConstraintTypeMismatch,
    ContradictoryConstraint,
    EmptyPrefix,
    RoleGrantNotIssuable,
    ShadowedRule,
)
from agentgate.policy._lint._declarations import (
    BudgetCountsNothing,
    LoggableUndeclaredArgument,
    QuotaCountsNothing,
    RuleForUndeclaredResource,
    ToolNotAudited,
    ToolWithoutRule,
)
from agentgate.policy._lint._delegation import (
    DelegatedBudgetAboveRole,
    DelegatesUnheldCapability,
    DelegationWiderThanRole,
    DelegationWithoutDepth,
    SubAgentSharesGrant,
)
from agentgate.policy._lint._lifetime import (
    DelegatedTtlAboveDelegator,
    DelegationWithoutTtl,
    RevocationDisabled,
    RoleWithoutTtl,
    TtlAbovePolicyMax,
)
from agentgate.policy._lint._names import NamesDifferOnlyInCase, NamesReadAlike, UnclearArgumentName
from agentgate.policy._lint._principals import (
    AgentInheritsRole,
    AgentWithoutRoles,
    InheritsRulesNotBudget,
    PrincipalWithoutKey,
    RoleKindMismatch,
    RoleNeverHeld,
    TrustAnchorWithoutKey,
    WildcardCapabilityForAgent,
)
from agentgate.policy._load import Policy

RULES: tuple[LintRule, ...] = (
    DelegatesUnheldCapability(),
    DelegationWiderThanRole(),
    DelegatedBudgetAboveRole(),
    ApprovalGateBypass(),
    AgentInheritsRole(),
    InheritsRulesNotBudget(),
    WildcardCapabilityForAgent(),
    PrincipalWithoutKey(),
    AgentApproves(),
    RoleKindMismatch(),
    AgentWithoutRoles(),
    SubAgentSharesGrant(),
    RoleWithoutTtl(),
    TtlAbovePolicyMax(),
    DelegationWithoutTtl(),
    DelegatedTtlAboveDelegator(),
    RevocationDisabled(),
    ToolWithoutRule(),
    RoleNeverHeld(),
    RuleForUndeclaredResource(),
    QuotaCountsNothing(),
    BudgetCountsNothing(),
    ConstraintOnUndeclaredArgument(),
    ContradictoryConstraint(),
    EmptyPrefix(),
    RoleGrantNotIssuable(),
    ConstraintTypeMismatch(),
    ShadowedRule(),
    TrustAnchorWithoutKey(),
    ToolNotAudited(),
    LoggableUndeclaredArgument(),
    GateOnUndeclaredArgument(),
    ApprovalUnreachable(),
    ApproverListedTwice(),
    NamesDifferOnlyInCase(),
    NamesReadAlike(),
    UnclearArgumentName(),
    DelegationWithoutDepth(),
)
"""Every lint rule, in the order they run. Their order does not order the findings: ``lint``
sorts them by line, then by code (a code is one rule's), and keeps the order a rule yields its
findings of one line in."""


def lint(policy: Policy, rules: tuple[LintRule, ...] = RULES) -> tuple[Finding, ...]:
    """Every finding of ``rules`` on ``policy``, ordered by line. Never raises for a loaded policy;
    anything but a ``Policy`` is a ``PolicyError``."""
    if not isinstance(policy, Policy):
        raise PolicyError(
            f"lint takes a Policy (from load_policy or parse_policy), got {type(policy).__name__}"
        )
    findings = [f for rule in rules for f in rule.check(policy)]
    return tuple(sorted(findings, key=lambda f: (f.line if f.line is not None else 0, f.code)))


__all__ = ["RULES", "LintRule", "lint"]
