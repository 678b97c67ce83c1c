"""agentgate: decides what an AI agent may run, when, where, and under whose authority.

The public face: import from here. Subpackages expose what the integrations need; modules
whose names start with an underscore are private.
"""

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
