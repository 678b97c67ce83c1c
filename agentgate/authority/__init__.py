"""The authority engine: signed grants, delegation chains, invocations and decisions.

``issue`` and ``delegate`` make chains; ``Invocation.sign`` binds one call to its holder;
``decide`` (or ``Authority.decide``) answers allow, deny or approval required with findings;
``revoke`` kills a grant and every grant below it. docs/token-format.md specifies the bytes.

Where each part lives: the grant values, the format's limits and the wire form (``_grant``),
strict parsing (``_parsing``), signatures and trust anchors (``_signatures``), what stops a chain
from being valid, as findings (``_chain_findings``), ``issue``/``delegate``/``verify_chain``
(``_operations``); beside them the byte encodings (``_encoding``), invocations (``_invocation``),
decisions (``_decision``), the cache of verified chains they read (``_chain_cache``), and
revocation with the store's record of grants (``_revocation``).
"""

from __future__ import annotations

from agentgate.authority._chain_cache import ChainCache, chain_weight
from agentgate.authority._chain_findings import findings_of
from agentgate.authority._decision import (
    ApprovalHook,
    ApprovalRequirement,
    Authority,
    Decision,
    decide,
)
from agentgate.authority._grant import (
    DEFAULT_SKEW,
    MAX_LINKS,
    MAX_SKEW,
    MAX_TOKEN_BYTES,
    Budget,
    Chain,
    Grant,
)
from agentgate.authority._invocation import Invocation, args_digest
from agentgate.authority._operations import delegate, issue, verify_chain
from agentgate.authority._parsing import parse_chain
from agentgate.authority._revocation import (
    HolderRevocation,
    HolderScan,
    Revocation,
    prune_grants,
    record,
    revoke,
    revoke_holder,
    scan_holder,
)
from agentgate.findings import Outcome
from agentgate.store.grants import GrantRepository

sign_invocation = Invocation.sign
"""Alias of ``Invocation.sign``."""


__all__ = [
    "DEFAULT_SKEW",
    "MAX_LINKS",
    "MAX_SKEW",
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
    "HolderScan",
    "Invocation",
    "Outcome",
    "Revocation",
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
    "scan_holder",
    "sign_invocation",
    "verify_chain",
]
