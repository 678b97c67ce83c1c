"""What the ``Gate`` and its parts check their arguments against (module-level type tuples, and
the names of the expected values in ``InputError`` messages), and the findings of a call that
carries no identity (``_NO_CHAIN``) or one that is not the agent's own (``inherited_identity``)."""

from __future__ import annotations

from agentgate._names import _expect_id as _expect_id  # re-exported: the Gate's parts check ids with it
from agentgate.findings import Finding, FindingKind
from agentgate.gate._authorization import AgentIdentity

_NONE = type(None)
_TEXT_OR_NONE = (str, _NONE)


def _is_text_pair(value: object) -> bool:
    return type(value) is tuple and len(value) == 2 and all(isinstance(part, str) for part in value)


_IDENTITY_OR_NONE = (AgentIdentity, _NONE)
"""Module-level tuples: ``isinstance`` against them allocates nothing (``X | None`` would build a
union at each call of ``Gate.authorize``, the hot path)."""
_IDENTITY = "an AgentIdentity (Gate.issue, Gate.delegate)"
_AUTHORIZATION = "the Authorization that Gate.authorize returned"


def _finding(kind: FindingKind, code: str, message: str, hint: str | None = None) -> Finding:
    return Finding(kind=kind, code=code, message=message, hint=hint)


_NO_CHAIN = _finding(
    FindingKind.AUTHORITY_CHAIN_OPACITY,
    "no_chain",
    "the run carries no agent identity, so no authority can be shown for this call: run the agent "
    "with context=AgentIdentity(...), made by Gate.issue or Gate.delegate",
    "run the agent with context=AgentIdentity(...)",
)
"""The fix is in the message as well as the hint: a refusal's reasons are its findings' messages
(until review R64 this one named no fix)."""


_OWN_GRANT = (
    "give the sub-agent a grant of its own with Gate.delegate (in LangGraph, expose it through "
    "delegation_tool), or issue the principal a grant to its own key with Gate.issue"
)


_OWN_NAME = (
    "delegate to the sub-agent under a name the policy does not give another key, or issue the "
    "principal a grant to its own key with Gate.issue"
)


_DELEGATE_HINT = "expose the sub-agent through delegation_tool so that it gets its own attenuated grant"
_NAME_HINT = "name the agent with a name the policy does not give another key"


def inherited_identity(what: str, fix: str = _OWN_GRANT, hint: str = _DELEGATE_HINT) -> Finding:
    """The ``implicit_trust_inheritance`` finding of a call made on an identity that is not the
    calling agent's own, ``what`` saying whose it is and ``fix`` (``hint``) what to do: by default give the
    agent a grant of its own; ``_OWN_NAME`` (``_NAME_HINT``) for a sub-agent's own grant under a
    principal's name.
    The fix is in the message as well as the hint, as ``_NO_CHAIN``'s (until review R64 the
    refusal's reason named none)."""
    return _finding(
        FindingKind.IMPLICIT_TRUST_INHERITANCE,
        "inherited_identity",
        f"{what}: {fix}",
        hint,
    )
