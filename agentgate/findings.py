"""Findings: the typed evidence of the four failure states of an authority boundary.

Both the policy linter and the authority engine report findings and decide outcomes; this
module is below both so that ``policy`` never imports ``authority``.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from agentgate._shown import shown_path


class FindingKind(StrEnum):
    """Exactly one of the four failure states (docs/concepts.md)."""

    SCOPE_CREEP = "scope_creep"
    IMPLICIT_TRUST_INHERITANCE = "implicit_trust_inheritance"
    NON_REVOCABLE_GRANT = "non_revocable_grant"
    AUTHORITY_CHAIN_OPACITY = "authority_chain_opacity"


class Outcome(StrEnum):
    """The answer of a decision, from the policy alone or from the whole authority check."""

    ALLOW = "allow"
    DENY = "deny"
    APPROVAL_REQUIRED = "approval_required"


class Severity(StrEnum):
    ERROR = "error"
    WARNING = "warning"


class Finding(BaseModel):
    """One detected failure state, with a specific code and a message a person can act on."""

    model_config = ConfigDict(frozen=True)

    kind: FindingKind
    """Which of the four failure states this is."""
    code: str
    """Specific, stable machine-readable code, e.g. ``budget_widened``."""
    message: str
    """What is wrong, in words a person can act on."""
    severity: Severity = Severity.ERROR
    file: str | None = None
    """Policy file, for lint findings."""
    line: int | None = None
    grant: str | None = None
    """Hash of the grant that caused it, for chain findings."""
    field: str | None = None
    """The offending field (``budget``, ``expiry``, a capability...), where one is to blame."""
    hint: str | None = None
    """How to fix it."""

    def where(self) -> str:
        """``file:line`` or the grant id, or an empty string; the file as errors show one
        (``_shown.shown_path``: one line, each unprintable character escaped), so that a finding
        logged for a policy named with a line break or an escape is one line (until review R55,
        raw)."""
        if self.file:
            file = shown_path(self.file)
            return f"{file}:{self.line}" if self.line is not None else file
        return self.grant or ""
