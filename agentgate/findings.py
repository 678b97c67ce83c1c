"""Findings: the typed evidence of the four failure states of an authority boundary.

Both the policy linter and the authority engine report findings and decide outcomes; this
module is below both so that ``policy`` never imports ``authority``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import StrEnum

from agentgate._shown import shown, shown_path
from agentgate.errors import InputError


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


@dataclass(frozen=True, slots=True)
class Finding:
    """One detected failure state, with a specific code and a message a person can act on.

    Immutable and hashable; ``dataclasses.replace`` makes a changed copy (checked as a new one
    is). ``kind`` and ``severity`` may be given as their values (``"scope_creep"``); anything
    else of the wrong type is an ``InputError`` naming the field. A plain class, not a Pydantic
    model (until review R81), so that a command that decides grants starts without importing
    Pydantic (docs/cli.md, "Start-up")."""

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

    def __post_init__(self) -> None:
        for name, values in (("kind", FindingKind), ("severity", Severity)):
            try:
                object.__setattr__(self, name, values(getattr(self, name)))
            except ValueError:
                said = ", ".join(values)
                raise InputError(
                    f"finding {name} must be one of {said}, got {shown(getattr(self, name))}"
                ) from None
        for name in ("code", "message", "file", "grant", "field", "hint"):
            value = getattr(self, name)
            if not isinstance(value, str) and (value is not None or name in ("code", "message")):
                raise InputError(f"finding {name} must be text, got {shown(value)}")
        if self.line is not None and (isinstance(self.line, bool) or not isinstance(self.line, int)):
            raise InputError(f"finding line must be a whole number, got {shown(self.line)}")

    def as_json(self) -> dict[str, str | int]:
        """The finding as JSON values, fields in their order and those that are ``None`` left
        out: what ``--json`` prints and a decision's ``to_json`` holds."""
        shown_fields: dict[str, str | int] = {}
        for name in _FIELDS:
            value = getattr(self, name)
            if value is not None:
                shown_fields[name] = value.value if isinstance(value, StrEnum) else value
        return shown_fields

    def where(self) -> str:
        """``file:line`` or the grant id, or an empty string; the file as errors show one
        (``_shown.shown_path``: one line, each unprintable character escaped), so that a finding
        logged for a policy named with a line break or an escape is one line (until review R55,
        raw)."""
        if self.file:
            file = shown_path(self.file)
            return f"{file}:{self.line}" if self.line is not None else file
        return self.grant or ""


_FIELDS = tuple(f.name for f in fields(Finding))
