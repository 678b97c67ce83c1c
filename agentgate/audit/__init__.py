"""Evidence: the Merkle audit log's entries, hashing, signed checkpoints, proofs and spans.

The log itself (append, checkpoint, verify, prove) is ``agentgate.store.audit.AuditLog``; the
OpenTelemetry span helpers are in ``agentgate.audit.spans``. Formats: docs/audit-format.md.
"""

from agentgate.audit.entry import ENTRY_KINDS, AuditEntry, argument_digest, redact, utc_now
from agentgate.audit.merkle import (
    RootAccumulator,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    verify_consistency,
    verify_inclusion,
)
from agentgate.audit.note import Checkpoint, open_checkpoint, sign_checkpoint, verifier_key
from agentgate.audit.proof import ProofBundle, verify_bundle

__all__ = [
    "ENTRY_KINDS",
    "AuditEntry",
    "Checkpoint",
    "ProofBundle",
    "RootAccumulator",
    "argument_digest",
    "consistency_proof",
    "inclusion_proof",
    "leaf_hash",
    "open_checkpoint",
    "redact",
    "sign_checkpoint",
    "utc_now",
    "verifier_key",
    "verify_bundle",
    "verify_consistency",
    "verify_inclusion",
]
