"""agentgate: decides what an AI agent may run, when, where, and under whose authority.

The public face: import from here. Subpackages expose what the integrations need; modules
whose names start with an underscore are private.
"""

from typing import TYPE_CHECKING

from agentgate._lazy import lazy_exports

if TYPE_CHECKING:  # the names, for type checkers; at run time each is imported on first use
    from agentgate.authority import Chain, Decision, Invocation, delegate, issue, revoke, verify_chain
    from agentgate.capabilities import Call, Capability, attenuates, covers, parse_capability
    from agentgate.errors import (
        AgentGateError,
        ApprovalRequired,
        AuditError,
        AuthorityError,
        BudgetExceeded,
        Denied,
        DispatchError,
        InputError,
        PolicyError,
        SchedulingError,
        StoreError,
        TamperDetected,
    )
    from agentgate.findings import Finding, FindingKind
    from agentgate.gate import AgentIdentity, Approval, Authorization, Gate
    from agentgate.keys import PublicKey, SigningKey, load_public_key, load_signing_key
    from agentgate.policy import Policy, PolicyIndex, lint, load_policy
    from agentgate.store import Store, open_store

__version__ = "0.1.0"

# Importing everything up front cost about a second before any command could answer (or
# catch Ctrl-C): each public name is imported from its module when first used (PEP 562).
_EXPORTS: dict[str, str] = {
    "AgentGateError": "agentgate.errors",
    "AgentIdentity": "agentgate.gate",
    "Approval": "agentgate.gate",
    "ApprovalRequired": "agentgate.errors",
    "AuditError": "agentgate.errors",
    "AuthorityError": "agentgate.errors",
    "Authorization": "agentgate.gate",
    "BudgetExceeded": "agentgate.errors",
    "Call": "agentgate.capabilities",
    "Capability": "agentgate.capabilities",
    "Chain": "agentgate.authority",
    "Decision": "agentgate.authority",
    "Denied": "agentgate.errors",
    "DispatchError": "agentgate.errors",
    "Finding": "agentgate.findings",
    "FindingKind": "agentgate.findings",
    "Gate": "agentgate.gate",
    "InputError": "agentgate.errors",
    "Invocation": "agentgate.authority",
    "Policy": "agentgate.policy",
    "PolicyError": "agentgate.errors",
    "PolicyIndex": "agentgate.policy",
    "PublicKey": "agentgate.keys",
    "SchedulingError": "agentgate.errors",
    "SigningKey": "agentgate.keys",
    "Store": "agentgate.store",
    "StoreError": "agentgate.errors",
    "TamperDetected": "agentgate.errors",
    "attenuates": "agentgate.capabilities",
    "covers": "agentgate.capabilities",
    "delegate": "agentgate.authority",
    "issue": "agentgate.authority",
    "lint": "agentgate.policy",
    "load_policy": "agentgate.policy",
    "load_public_key": "agentgate.keys",
    "load_signing_key": "agentgate.keys",
    "open_store": "agentgate.store",
    "parse_capability": "agentgate.capabilities",
    "revoke": "agentgate.authority",
    "verify_chain": "agentgate.authority",
}


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


__all__ = [
    "AgentGateError",
    "AgentIdentity",
    "Approval",
    "ApprovalRequired",
    "AuditError",
    "AuthorityError",
    "Authorization",
    "BudgetExceeded",
    "Call",
    "Capability",
    "Chain",
    "Decision",
    "Denied",
    "DispatchError",
    "Finding",
    "FindingKind",
    "Gate",
    "InputError",
    "Invocation",
    "Policy",
    "PolicyError",
    "PolicyIndex",
    "PublicKey",
    "SchedulingError",
    "SigningKey",
    "Store",
    "StoreError",
    "TamperDetected",
    "attenuates",
    "covers",
    "delegate",
    "issue",
    "lint",
    "load_policy",
    "load_public_key",
    "load_signing_key",
    "open_store",
    "parse_capability",
    "revoke",
    "verify_chain",
]
