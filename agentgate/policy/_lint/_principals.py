"""Lint rules on principals, keys and roles: an agent role that inherits a whole role or holds a
wildcard, a role that inherits rules but no budget, a principal without a key of its own or an
agent holding a trust anchor's, a role declared for another kind of principal than one that
holds it (implicit_trust_inheritance), a trust anchor without a key, a
role no principal holds and an agent that holds no role (authority_chain_opacity).
"""

from __future__ import annotations

from collections.abc import Iterator

from agentgate.findings import Finding, Severity
from agentgate.policy._lint._common import INHERIT, OPAQUE, LintRule
from agentgate.policy._load import Policy


class AgentInheritsRole(LintRule):
    code = "agent_inherits_role"
    kind = INHERIT
    hint = "list the capabilities the agent needs instead of inheriting a whole role"

    def check(self, policy: Policy) -> Iterator[Finding]:
        for name, role in policy.document.roles.items():
            if role.inherits and policy.is_agent_role(name):
                yield self.finding(
                    policy,
                    f"agent role {name} inherits {', '.join(role.inherits)} wholesale",
                    policy.line_of("roles", name, "inherits"),
                )


class InheritsRulesNotBudget(LintRule):
    code = "inherits_rules_not_budget"
    kind = INHERIT
    severity = Severity.WARNING
    hint = "give the role a budget of its own: inherits brings another role's rules, never its budget"

    def check(self, policy: Policy) -> Iterator[Finding]:
        roles = policy.document.roles
        for name, role in roles.items():
            if not role.inherits or role.budget is not None:
                continue
            budgeted = [r for r in policy.role_closure(name)[1:] if roles[r].budget is not None]
            if budgeted:
                first = roles[budgeted[0]].budget
                assert first is not None
                yield self.finding(
                    policy,
                    f"role {name} holds the rules of {', '.join(budgeted)} but no budget: its grants "
                    f"carry none, where {budgeted[0]}'s carry {first.limit} {first.unit}",
                    policy.line_of("roles", name, "inherits"),
                )


class WildcardCapabilityForAgent(LintRule):
    code = "wildcard_capability_for_agent"
    kind = INHERIT
    hint = "name the tools the agent needs; a wildcard also grants every tool added later"

    def check(self, policy: Policy) -> Iterator[Finding]:
        # What any role delegates goes to a sub-agent (a grant is handed on to an agent acting
        # for its first holder), whatever the role's kind: until review R96 a human role's
        # ``delegation.capabilities: [tool:*]`` handed every sub-agent every tool unreported.
        for name in policy.document.roles:
            held = policy.rules.get(name, ()) if policy.is_agent_role(name) else ()
            for rule, holder in (
                *((r, f"agent role {name} holds") for r in held),
                *((r, f"role {name} delegates to sub-agents") for r in policy.delegable.get(name, ())),
            ):
                pattern = rule.capability.resource
                if pattern.endswith(":*"):
                    yield self.finding(policy, f"{holder} every {pattern[:-2]}: {pattern}", rule.line)
                elif pattern.endswith(".*"):
                    yield self.finding(
                        policy, f"{holder} the wildcard {pattern}", rule.line, severity=Severity.WARNING
                    )


class PrincipalWithoutKey(LintRule):
    code = "principal_without_key"
    kind = INHERIT
    hint = "give the principal its own 'did:' or 'key:'; without one it can only act on someone else's key"

    def check(self, policy: Policy) -> Iterator[Finding]:
        first_holder: dict[str, str] = {}
        for name, did in policy.principal_dids.items():
            line = policy.line_of("principals", name, key=True)
            if did is None:
                yield self.finding(policy, f"principal {name} has no key of its own", line)
            elif did in first_holder:
                yield self.finding(
                    policy,
                    f"principal {name} uses the same key as {first_holder[did]}: neither has its own",
                    line,
                )
            else:
                first_holder[did] = name
        anchors = {did: name for name, did in policy.anchor_dids.items() if did is not None}
        for name, spec in policy.document.principals.items():
            did = policy.principal_dids.get(name)
            if spec.kind == "agent" and did in anchors:
                yield self.finding(
                    policy,
                    f"agent {name} holds the key of trust anchor {anchors[did]}: it can issue itself any root grant",
                    policy.line_of("principals", name, key=True),
                    hint="give the agent its own key; keep trust anchor keys away from agents",
                )


class TrustAnchorWithoutKey(LintRule):
    code = "trust_anchor_without_key"
    kind = OPAQUE
    hint = "give the anchor 'did:' or 'key:'; a root grant from it could not be verified"

    def check(self, policy: Policy) -> Iterator[Finding]:
        for name, did in policy.anchor_dids.items():
            if did is None:
                yield self.finding(
                    policy, f"trust anchor {name} has no key", policy.line_of("trust_anchors", name, key=True)
                )


class RoleNeverHeld(LintRule):
    code = "role_never_held"
    kind = OPAQUE
    severity = Severity.WARNING
    hint = "add the role to the roles of the principal meant to hold it, or remove the role"

    def check(self, policy: Policy) -> Iterator[Finding]:
        # A root grant is issued only for a role its holder holds (Gate.issue, ``grant issue
        # --policy --role``) and a decision reads only the roles its principal holds: a role no
        # principal holds, itself or through ``inherits``, never allows a call. Until review R60
        # lint said nothing, and such a role read as authority someone had. A policy whose
        # principals hold no role at all (a template, a deny-all) is not reported role by role,
        # nor is a role that holds no rule, itself or through inherits (nothing reads as held).
        held = {role for name in policy.document.principals for role in policy.principal_roles(name)}
        if not held:
            return
        for name in policy.document.roles:
            if name not in held and (rules := len(policy.effective_rules(name))):
                yield self.finding(
                    policy,
                    f"role {name} is held by no principal, itself or through a role that inherits it: "
                    f"no grant can be issued for it, and the {rules} rule(s) it holds never allow a call",
                    policy.line_of("roles", name, key=True),
                )


class AgentWithoutRoles(LintRule):
    code = "agent_without_roles"
    kind = OPAQUE
    severity = Severity.WARNING
    hint = (
        "list the roles the agent needs under its 'roles', or remove the principal if it is not meant to act"
    )

    def check(self, policy: Policy) -> Iterator[Finding]:
        # A decision reads only the roles of the principal a call acts for, and a root grant is
        # issued only for a role its holder holds: an agent declared with no roles is refused every
        # call, a sub-agent holding its key too, whatever its grant says (docs/policy-reference.md,
        # delegation). Until review R73 lint said nothing. A policy without any rule (a template,
        # a deny-all) allows no one anything, and is not reported agent by agent; nor is an agent
        # named as an approver, which is there to sign, not to act (``agent_approves`` reports it).
        if not any(policy.effective_rules(role) for role in policy.document.roles):
            return
        approvers = {name for gate in policy.document.approvals.values() for name in gate.approvers}
        for name, principal in policy.document.principals.items():
            if principal.kind == "agent" and not principal.roles and name not in approvers:
                yield self.finding(
                    policy,
                    f"agent {name} holds no role: every call it makes, or a sub-agent holding its key "
                    "makes, is denied, whatever grant it holds",
                    policy.line_of("principals", name, key=True),
                )


class RoleKindMismatch(LintRule):
    code = "role_kind_mismatch"
    kind = INHERIT
    hint = "give the principal a role declared for its kind, or declare the role for the kind that holds it"

    def check(self, policy: Policy) -> Iterator[Finding]:
        # A role declared ``kind: human`` (the approvers', an operator's) held by an agent hands
        # the agent what was written for people; until review R61 lint said nothing. Another
        # mismatch (an agent role held by a person) hands no agent anything: a warning.
        roles = policy.document.roles
        for name, principal in policy.document.principals.items():
            for role in dict.fromkeys(principal.roles):
                declared = roles[role].kind
                if declared is not None and declared != principal.kind:
                    yield self.finding(
                        policy,
                        f"{principal.kind} {name} holds role {role}, declared kind: {declared}",
                        policy.line_of("principals", name, key=True),
                        severity=Severity.ERROR if principal.kind == "agent" else Severity.WARNING,
                    )
