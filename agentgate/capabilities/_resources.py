"""Resource names and patterns: a canonical name or a ``CapabilityError`` (never a guess),
``kind:*`` and ``prefix.*`` patterns, what a pattern names and whether one lies within another.
"""

from __future__ import annotations

import re

from agentgate.errors import CapabilityError

RESOURCE_KINDS = ("tool", "model", "gpu")
DEFAULT_ACTIONS = {"tool": "invoke", "model": "generate", "gpu": "lease"}

_TOOL_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*(?:\.[a-z0-9][a-z0-9_-]*)*")
_MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*(?:[./:][A-Za-z0-9][A-Za-z0-9_-]*)*")
MAX_NAME_LENGTH = 200


def canonical_resource(resource: str) -> str:
    """Return ``resource`` if it is canonical (``kind:name``), else raise ``CapabilityError``.

    Nothing is normalized silently: a name that differs from its canonical form in case,
    whitespace, Unicode or path syntax is ambiguous, and ambiguity is refused.
    """
    if not isinstance(resource, str):
        raise CapabilityError(f"resource must be a string, got {type(resource).__name__}")
    if len(resource) > MAX_NAME_LENGTH:
        raise CapabilityError(f"resource name longer than {MAX_NAME_LENGTH} characters")
    kind, sep, name = resource.partition(":")
    if not sep or kind not in RESOURCE_KINDS:
        raise CapabilityError(
            f"resource {resource!r} must start with one of {', '.join(k + ':' for k in RESOURCE_KINDS)}"
        )
    grammar = _MODEL_NAME if kind == "model" else _TOOL_NAME
    if not grammar.fullmatch(name):
        raise CapabilityError(
            f"resource name {name!r} is not canonical for {kind}: "
            + (
                "letters, digits, '_', '-', joined by '.', '/' or ':'"
                if kind == "model"
                else "lower-case ASCII letters, digits, '_' and '-', joined by '.'"
            )
        )
    return resource


def _check_pattern(pattern: str) -> str:
    """``pattern`` if it is a canonical name, ``kind:*`` or ``NAME.*`` naming some resource, else
    ``CapabilityError``. A ``NAME.*`` whose stem leaves no room for a further segment within
    ``MAX_NAME_LENGTH`` names nothing and is refused: until review R64 it was held, and judged
    wider than any parent, with a witness no capability covers."""
    if pattern.endswith(":*"):
        kind = pattern[:-2]
        if kind not in RESOURCE_KINDS:
            raise CapabilityError(f"resource pattern {pattern!r}: unknown kind {kind!r}")
        return pattern
    if pattern.endswith(".*"):
        canonical_resource(pattern[:-2])
        if len(pattern) - 1 >= MAX_NAME_LENGTH:
            raise CapabilityError(
                f"resource pattern {pattern[:40]!r}... names no resource: a name is at most "
                f"{MAX_NAME_LENGTH} characters, and its stem has {len(pattern) - 2}"
            )
        return pattern
    return canonical_resource(pattern)


def _is_canonical(resource: str) -> bool:
    """Whether ``canonical_resource`` would return ``resource`` (a string) rather than refuse it."""
    kind, _, name = resource.partition(":")
    if len(resource) > MAX_NAME_LENGTH or kind not in RESOURCE_KINDS:
        return False
    return (_MODEL_NAME if kind == "model" else _TOOL_NAME).fullmatch(name) is not None


def pattern_matches(pattern: str, resource: str) -> bool:
    """Whether ``resource`` is named by ``pattern`` (exact, ``kind:*`` or ``prefix.*``).

    A wildcard names canonical resources only: ``tool:search.*`` never names
    ``tool:search.web\n``, a zero-width or upper-case variant, or ``tool:search.*`` itself. An
    exact pattern is canonical, so equal to it is canonical too."""
    if pattern.endswith((":*", ".*")):
        stem = pattern[:-1]
        return len(resource) > len(stem) and resource.startswith(stem) and _is_canonical(resource)
    return resource == pattern


def pattern_within(child: str, parent: str) -> bool:
    """Exact: every resource named by ``child`` is named by ``parent``."""
    if child == parent:
        return True
    if child.endswith((":*", ".*")):
        # a wildcard child is within a wildcard parent whose stem it extends
        if not parent.endswith((":*", ".*")):
            return False
        return child[:-1].startswith(parent[:-1])
    return pattern_matches(parent, child)


def _pattern_witness(child: str, parent: str) -> str:
    """A resource named by ``child``, preferably one that ``parent`` does not name. Each candidate
    is a canonical name, so ``child`` names it (near the length limit only ``STEM.0`` fits)."""
    if not child.endswith((":*", ".*")):
        return child
    candidates = [child[:-1] + suffix for suffix in ("zz-witness", "zz-other.zz", "0")]
    named = [c for c in candidates if _is_canonical(c)]
    return next((c for c in named if not pattern_matches(parent, c)), named[0])
