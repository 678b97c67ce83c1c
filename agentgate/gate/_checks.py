"""What the ``Gate`` and its parts check their arguments against (module-level type tuples, and
the names of the expected values in ``InputError`` messages), and the findings of a call that
carries no identity (``_NO_CHAIN``) or one that is not the agent's own (``inherited_identity``)."""

from __future__ import annotations

import hashlib
import weakref
from typing import TypeGuard

from agentgate import _confusables
from agentgate._names import _expect_id as _expect_id  # re-exported: the Gate's parts check ids with it
from agentgate.errors import InputError
from agentgate.findings import Finding, FindingKind
from agentgate.gate._authorization import AgentIdentity, shown
from agentgate.policy import Policy

_NONE = type(None)
_TEXT_OR_NONE = (str, _NONE)


def _is_text_pair(value: object) -> TypeGuard[tuple[str, str]]:
    return type(value) is tuple and len(value) == 2 and all(isinstance(part, str) for part in value)


def _is_ascii_pair(value: object) -> bool:
    """Whether ``value`` is an ``asked_in`` known to be good without encoding it: a pair of ASCII
    text (the hot path of ``Gate.authorize``; ``_expect_asked_in`` checks any other)."""
    return _is_text_pair(value) and value[0].isascii() and value[1].isascii()


def _expect_asked_in(value: object) -> None:
    """``InputError`` naming ``asked_in`` unless it is ``None`` or a ``(scope, version)`` pair of
    valid Unicode text (``_expect_id``, as a call's ``call_id``): both are hashed into the call's
    key and kept in the store. Until review R89 a lone surrogate was taken, and failed later: an
    ``InputError`` naming no argument (scope), or a ``StoreError`` (version) after a vote towards
    a quorum above one was committed."""
    if value is None:
        return
    if not _is_text_pair(value):
        raise InputError(f"asked_in must be a (scope, version) pair of text or None, got {shown(value)}")
    for part, name in zip(value, ("scope", "version"), strict=True):
        _expect_id(part, f"asked_in's {name}")


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


_GRANTED_NAME = (
    "run the agent under the name it was granted, or give it a grant of its own under this name "
    "with Gate.issue or Gate.delegate"
)
_GRANTED_NAME_HINT = "run the agent under the name its grant was issued or delegated under"

_SUB_AGENT = "sub-agent "
_CALL = "; call "
_AGENT = "; agent "
_TAG_CHARS = 32
_HEX = frozenset("0123456789abcdef")


def name_tag(text: str) -> str:
    """What the Gate signs into a grant's purpose for a name or a call: a digest (32 hex digits),
    so that the purpose stays within ``MAX_PURPOSE`` whatever the name's length, and thread ids
    and tool call ids do not show in the token."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:_TAG_CHARS]


def issued_purpose(role: str, name: str) -> str:
    """The purpose ``Gate.issue`` signs into a root grant for ``role`` to the agent ``name``
    (a digest of the name: a role name and an agent name together may be longer than a purpose
    holds)."""
    return f"role {role}{_AGENT}{name_tag(name)}"


def delegated_purpose(name: str, call: str | None) -> str:
    """The purpose ``Gate.delegate`` signs into a grant to the sub-agent ``name`` (at most 249
    characters: a name holds at most ``MAX_NAME_CHARS``), for ``call`` when one delegates."""
    return f"{_SUB_AGENT}{name}" if call is None else f"{_SUB_AGENT}{name}{_CALL}{name_tag(call)}"


def _is_tag(text: str) -> bool:
    return len(text) == _TAG_CHARS and _HEX.issuperset(text)


def call_tag_ending(name: str) -> str | None:
    """What a sub-agent's ``name`` would be read as in the purpose ``delegated_purpose`` signs
    when it ends as a delegating call's purpose does (``; call`` and 32 hex digits): the name
    without that ending, which ``granted_elsewhere`` takes for the name granted, else ``None``.
    ``Gate.delegate`` refuses such a name delegated without a call: its grant's purpose is that
    of a grant to the shorter name for a call, so the name it was given could not run on it and
    the shorter name could (until review R87 it was delegated to). With a call, whose tag is
    signed after it, the purpose reads as the name given, and it is delegated (review R87b: R87
    refused it too, and with it the grants so delegated before, which its call resumes)."""
    cut = len(name) - _TAG_CHARS - len(_CALL)
    if cut >= 0 and name[cut : cut + len(_CALL)] == _CALL and _is_tag(name[-_TAG_CHARS:]):
        return name[:cut]
    return None


def granted_elsewhere(purpose: str, name: str) -> str | None:
    """How a grant whose signed ``purpose`` is one the Gate writes (``issued_purpose``,
    ``delegated_purpose``) was granted under another name than ``name``: the words for a
    refusal's message; ``None`` when it was granted under ``name``, or its purpose binds no name
    (a grant made outside the Gate, or by ``Gate.issue`` before review R66)."""
    if purpose.startswith(_SUB_AGENT):
        granted = purpose[len(_SUB_AGENT) :]
        if (shorter := call_tag_ending(granted)) is not None:
            granted = shorter
        return None if granted == name else f"delegated to sub-agent {granted}"
    cut = purpose.rfind(_AGENT)
    if not purpose.startswith("role ") or cut < 0 or not _is_tag(tag := purpose[cut + len(_AGENT) :]):
        return None
    return None if tag == name_tag(name) else f"issued as {purpose[:cut]} under another name"


def renamed_identity(identity: AgentIdentity, granted: str) -> Finding:
    """The ``inherited_identity`` finding of ``identity`` presenting a grant the Gate made under
    another name (``granted``, ``granted_elsewhere``'s words): it would act, and be recorded,
    under a name its grant was not given."""
    return inherited_identity(
        f"agent {identity.name} presents grant {identity.grant_id}, {granted}: it would act, and "
        "be recorded, under a name its grant was not given",
        _GRANTED_NAME,
        _GRANTED_NAME_HINT,
    )


_READ_PRINCIPALS: weakref.WeakKeyDictionary[Policy, dict[str, str]] = weakref.WeakKeyDictionary()
"""Per policy: each key of how a principal's name reads (``_confusables.readings``), to the name."""


def principals_named(policy: Policy, name: str) -> tuple[str, ...]:
    """The principals whose names ``name`` is, or reads as, in code point order: none for a free
    name, one for most. Reads as: the two are confusable (Unicode TR39's skeletons, of the NFKC
    forms, case folded: ``_confusables.readings``): ``Researcher``, a full-width
    ``ｒｅｓｅａｒｃｈｅｒ``, an all-Cyrillic ``геѕеагсһег`` (until review R68 only NFKC and case were
    folded). The policy refuses two principals that read alike (``policy._load``), yet reading
    alike is not transitive: a name has two readings, and ``bobI`` reads as ``bobi`` (``I`` case
    folded) and as ``bobl`` (``I`` taken for ``l``), two principals that read apart, so it names
    both. The Gate refuses such a name whatever its key (``several_principals``): until review
    R91 it was taken for one of them by the order of a set, which each process's hash seed set,
    and granted on that one's key in some processes. A principal's exact name computes
    nothing (it reads as no other: the policy refuses two that share a reading); another name's
    readings are kept (``readings``' cache)."""
    if name in policy.principal_dids:
        return (name,)
    read = _READ_PRINCIPALS.get(policy)
    if read is None:
        read = _READ_PRINCIPALS[policy] = {
            key: p for p in policy.principal_dids for key in _confusables.readings(p)
        }
    found = [read[key] for key in _confusables.readings(name) if key in read]
    return tuple(sorted(set(found))) if found else ()


def principal_named(policy: Policy, name: str) -> str | None:
    """The principal whose name ``name`` is, or reads as, else ``None`` (``principals_named``):
    for a name that reads as several, the first of them in code point order, the same in every
    process. Whether a name is a principal's at all; a rule that compares the principal's key
    with the agent's reads ``principals_named``, and refuses a name of several."""
    found = principals_named(policy, name)
    return found[0] if found else None


def several_principals(name: str, principals: tuple[str, ...], who: str = "agent") -> str:
    """Why an agent (``who``) named ``name``, which reads as each of ``principals`` (two or more,
    ``principals_named``), is refused whatever its key: it would act, and be recorded, as a
    principal whose key is not its own, as a principal's name on another key would."""
    listed = ", ".join(principals[:-1]) + f" and {principals[-1]}"
    return (
        f"{who} {name} reads as principals {listed} (Unicode's confusables: the principals read "
        "apart, the name reads as each), so it would act, and be recorded, as one whose key is "
        "not its own, whatever its key"
    )
