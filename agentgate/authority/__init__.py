"""The authority engine: signed grants, delegation chains, invocations and decisions.

``issue`` and ``delegate`` make chains; ``Invocation.sign`` binds one call to its holder;
``decide`` (or ``Authority.decide``) answers allow, deny or approval required with findings;
``revoke`` kills a grant and every grant below it. docs/token-format.md specifies the bytes.
"""

from __future__ import annotations

from agentgate.authority._decision import (
    ApprovalHook,
    ApprovalRequirement,
    Authority,
    ChainCache,
    Decision,
    HolderRevocation,
    chain_weight,
    decide,
    prune_grants,
    record,
    revoke,
    revoke_holder,
)
from agentgate.authority._grant import (
    DEFAULT_SKEW,
    MAX_LINKS,
    MAX_TOKEN_BYTES,
    Budget,
    Chain,
    Grant,
    delegate,
    findings_of,
    issue,
    parse_chain,
    verify_chain,
)
from agentgate.authority._invocation import Invocation, args_digest
from agentgate.findings import Outcome
from agentgate.store.grants import GrantRepository

sign_invocation = Invocation.sign
"""Alias of ``Invocation.sign``."""


__all__ = [
    "DEFAULT_SKEW",
    "MAX_LINKS",
    "MAX_TOKEN_BYTES",
    "ApprovalHook",
    "ApprovalRequirement",
    "Authority",
    "Budget",
    "Chain",
    "ChainCache",
    "Decision",
    "Grant",
    "GrantRepository",
    "HolderRevocation",
    "Invocation",
    "Outcome",
    "args_digest",
    "chain_weight",
    "decide",
    "delegate",
    "findings_of",
    "issue",
    "parse_chain",
    "prune_grants",
    "record",
    "revoke",
    "revoke_holder",
    "sign_invocation",
    "verify_chain",
]
