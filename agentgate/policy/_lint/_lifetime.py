"""Lint rules on a grant's life (non_revocable_grant): a role or a delegation without a time to
live, one above the policy's maximum or the delegator's own, and revocation switched off.
"""

from __future__ import annotations

from collections.abc import Iterator

from agentgate.findings import Finding
from agentgate.policy._lint._common import REVOKE, LintRule
from agentgate.policy._load import Policy


class RoleWithoutTtl(LintRule):
    code = "role_without_ttl"
    kind = REVOKE
    hint = "add ttl_s to the role (at most settings.max_ttl_s)"

    def check(self, policy: Policy) -> Iterator[Finding]:
        holding = _roles_holding_rules(policy)
        for name, role in policy.document.roles.items():
            if role.ttl_s is None and name in holding:
                yield self.finding(
                    policy, f"role {name} has no ttl_s", policy.line_of("roles", name, key=True)
                )


def _roles_holding_rules(policy: Policy) -> set[str]:
    """The roles that hold a rule, their own or one they inherit: the roles with rules, then every
    role that inherits one of them, found in one pass (not one closure per role)."""
    roles = policy.document.roles
    heirs: dict[str, list[str]] = {}
    for name, role in roles.items():
        for parent in role.inherits:
            heirs.setdefault(parent, []).append(name)
    holding = {name for name in roles if policy.rules.get(name)}
    pending = list(holding)
    while pending:
        for heir in heirs.get(pending.pop(), ()):
            if heir not in holding:
                holding.add(heir)
                pending.append(heir)
    return holding


class TtlAbovePolicyMax(LintRule):
    code = "ttl_above_policy_max"
    kind = REVOKE
    hint = "lower the TTL to at most settings.max_ttl_s"

    def check(self, policy: Policy) -> Iterator[Finding]:
        limit = policy.document.settings.max_ttl_s
        for name, role in policy.document.roles.items():
            if role.ttl_s is not None and role.ttl_s > limit:
                yield self.finding(
                    policy,
                    f"role {name} ttl_s {role.ttl_s} is above the policy maximum {limit}",
                    policy.line_of("roles", name, "ttl_s"),
                )
            d = role.delegation
            if d is not None and d.max_ttl_s is not None and d.max_ttl_s > limit:
                yield self.finding(
                    policy,
                    f"role {name} delegation max_ttl_s {d.max_ttl_s} is above the policy maximum {limit}",
                    policy.line_of("roles", name, "delegation", "max_ttl_s"),
                )


class DelegationWithoutTtl(LintRule):
    code = "delegation_without_ttl"
    kind = REVOKE
    hint = "add delegation.max_ttl_s, shorter than the role's ttl_s"

    def check(self, policy: Policy) -> Iterator[Finding]:
        for name, role in policy.document.roles.items():
            d = role.delegation
            if d is not None and d.max_depth > 0 and d.max_ttl_s is None:
                yield self.finding(
                    policy,
                    f"role {name} may delegate with no limit on the delegated grant's life",
                    policy.line_of("roles", name, "delegation"),
                )


class DelegatedTtlAboveDelegator(LintRule):
    code = "delegated_ttl_above_delegator"
    kind = REVOKE
    hint = "a delegated grant must not outlive its parent: make delegation.max_ttl_s <= the role's ttl_s"

    def check(self, policy: Policy) -> Iterator[Finding]:
        for name, role in policy.document.roles.items():
            d = role.delegation
            if (
                d is not None
                and d.max_ttl_s is not None
                and role.ttl_s is not None
                and d.max_ttl_s > role.ttl_s
            ):
                yield self.finding(
                    policy,
                    f"role {name} may delegate grants living {d.max_ttl_s}s, longer than its own {role.ttl_s}s",
                    policy.line_of("roles", name, "delegation", "max_ttl_s"),
                )


class RevocationDisabled(LintRule):
    code = "revocation_disabled"
    kind = REVOKE
    hint = (
        "remove 'revocation: false' / 'revocable: false': they switch nothing off, and a reader believes them"
    )

    def check(self, policy: Policy) -> Iterator[Finding]:
        if not policy.document.settings.revocation:
            yield self.finding(
                policy,
                "the policy asks that revocation checks be switched off; agentgate always checks revocation",
                policy.line_of("settings", "revocation"),
            )
        for name, role in policy.document.roles.items():
            if not role.revocable:
                yield self.finding(
                    policy,
                    f"role {name} asks for grants that cannot be revoked; agentgate always checks revocation",
                    policy.line_of("roles", name, "revocable"),
                )
