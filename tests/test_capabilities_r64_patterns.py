"""Review R64: resource patterns, against a brute-force oracle, and names that are not canonical.

The oracle reads a pattern as docs/policy-reference.md and docs/cli.md define it (``kind:NAME``
exact, ``kind:*`` every name of the kind, ``kind:stem.*`` one or more further segments) and
decides "within" by trying every resource of a domain holding each name and stem involved with
further segments, so that a pattern pair differs, if at all, at one of them.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgate.capabilities import (
    Call,
    Capability,
    attenuates,
    canonical_resource,
    covers,
    parse_capability,
    pattern_matches,
    pattern_within,
    witness,
)
from agentgate.errors import CapabilityError

NAMES = [
    "tool:search",
    "tool:search.web",
    "tool:search.web.deep",
    "tool:search-web",
    "tool:searchx",
    "tool:s",
    "model:Qwen/Qwen3-32B",
    "model:Qwen",
    "model:Qwen.x",
    "model:qwen",
    "gpu:h200",
    "gpu:h200.0",
]
PATTERNS = [*NAMES, *(name + ".*" for name in NAMES), "tool:*", "model:*", "gpu:*"]
_TOOL = re.compile(r"[a-z0-9][a-z0-9_-]*(\.[a-z0-9][a-z0-9_-]*)*")
_MODEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*([./:][A-Za-z0-9][A-Za-z0-9_-]*)*")


def _oracle_canonical(resource: str) -> bool:
    kind, sep, name = resource.partition(":")
    grammar = {"tool": _TOOL, "gpu": _TOOL, "model": _MODEL}.get(kind)
    return bool(sep) and grammar is not None and grammar.fullmatch(name) is not None and len(resource) <= 200


def _oracle_matches(pattern: str, resource: str) -> bool:
    if not _oracle_canonical(resource):
        return False
    if pattern.endswith(":*"):
        return resource.startswith(pattern[:-1])
    if pattern.endswith(".*"):
        return resource.startswith(pattern[:-1]) and len(resource) > len(pattern) - 1
    return resource == pattern


def _resources(*patterns: str) -> list[str]:
    out = list(NAMES)
    for pattern in patterns:
        stem = pattern.rstrip("*")
        out += [stem + "zz", stem + "zz.q", stem + "0", pattern.removesuffix(".*").removesuffix(":*")]
    return out


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.sampled_from(PATTERNS), st.sampled_from(PATTERNS))
def test_pattern_within_and_attenuates_agree_with_brute_force(parent: str, child: str) -> None:
    """Review R64: ``pattern_within(child, parent)``, and so ``attenuates`` on two capabilities
    differing only in resource, holds exactly when every resource of the domain that ``child``
    names, ``parent`` names (a dotted stem stops at a dot: ``tool:search.*`` never names
    ``tool:searchx`` or ``tool:search-web``; model names keep their case)."""
    expected = all(_oracle_matches(parent, r) for r in _resources(parent, child) if _oracle_matches(child, r))
    assert pattern_within(child, parent) is expected
    p, c = Capability.of(parent, "*"), Capability.of(child, "*")
    assert attenuates(p, c) is expected
    found = witness(p, c)
    assert (found is None) is expected
    if found is not None:
        assert covers(c, found) and not covers(p, found)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(st.sampled_from(PATTERNS), st.sampled_from([*PATTERNS, "tool:zz", "tool:search.zz.q"]))
def test_pattern_matches_agrees_with_the_documented_patterns(pattern: str, resource: str) -> None:
    """Review R64: ``pattern_matches`` and ``covers`` name a resource exactly as the docs say;
    a pattern never names itself (``tool:search.*`` is no tool) and a call cannot be for one."""
    expected = _oracle_matches(pattern, resource)
    assert pattern_matches(pattern, resource) is expected
    if _oracle_canonical(resource):
        assert covers(Capability.of(pattern, "*"), Call(resource, "invoke")) is expected


HOSTILE = [
    "tool:Search",
    " tool:search",
    "tool:search ",
    "tool: search",
    "tool:s\u0435arch",  # Cyrillic e
    "tool:\u0455earch",  # Cyrillic dze
    "tool:\ufb01le",  # the ligature fi, 'file' under NFKC
    "tool:\uff53earch",  # fullwidth s
    "\uff54ool:search",
    "tool:search\u200b",
    "tool:search\n",
    "tool:caf\u00e9",
    "tool:cafe\u0301",
    "tool:../x",
    "tool:a/../b",
    "tool:a..b",
    "tool:a.",
    "tool:.a",
    "tool:a%2Eb",
    "tool:a%2eb",
    "tool:a/b",
    "tool:",
    "TOOL:search",
    "tools:search",
    "tool:search*",
    "tool:search.**",
    "tool:*.search",
    "tool:*x",
    "tool:a.*.b",
    "tool:a.*.*",
    "tool:**",
    "model:../x",
    "model:a//b",
    "model:a/",
    "model:/a",
    "model:a::b",
    "model:a:*",
    "model:Qwen/*",
    "model:Qw\u0435n",
    "gpu:H200",
    "*:*",
    "*",
]


@pytest.mark.parametrize("text", HOSTILE)
def test_a_resource_that_is_not_canonical_is_refused_everywhere(text: str) -> None:
    """Review R64: a name that differs from a canonical one in case, whitespace, a look-alike or
    an NFC/NFKC form, path syntax, an empty segment, a trailing dot, a percent-escape or a
    misplaced wildcard is a ``CapabilityError`` as a pattern, in the one-line form and as a
    call's tool, never normalized; and no wildcard capability covers a call naming it."""
    with pytest.raises(CapabilityError):
        Capability.of(text)
    with pytest.raises(CapabilityError):
        parse_capability(text)
    with pytest.raises(CapabilityError):
        canonical_resource(text)
    kind, _, name = text.partition(":")
    if kind == "tool":
        with pytest.raises(CapabilityError):
            Call.tool(name)
    for pattern in ("tool:*", "model:*", "gpu:*", "tool:search.*", "model:Qwen.*"):
        assert not covers(Capability.of(pattern, "*"), Call(text, "invoke"))


@pytest.mark.parametrize("length", [198, 199, 200])
def test_a_wildcard_near_the_name_limit_names_a_resource_or_is_refused(length: int) -> None:
    """Review R64: ``tool:STEM.*`` with a stem of 199 or 200 characters names no resource (a
    name is at most 200 characters), so it is refused where it is built, as a pattern naming
    nothing is a mistake; with a stem of 198 it names the names of 200 characters, and the
    witness of its scope creep is one of them, a call it covers (it was ``STEM.zz-witness``, a
    name no capability covers)."""
    stem = "tool:" + "a" * (length - 5)
    if length > 198:
        with pytest.raises(CapabilityError, match="names no resource"):
            Capability.of(stem + ".*", "*")
        return
    child, parent = Capability.of(stem + ".*", "*"), Capability.of("tool:b", "*")
    assert not attenuates(parent, child)
    found = witness(parent, child)
    assert found is not None and covers(child, found) and not covers(parent, found)


ACTIONS = ["invoke", "read", "*"]
SPECS = st.sampled_from(
    [
        {},
        {"a": {"le": 1}},
        {"a": {"lt": 1}},
        {"a": {"eq": 1}},
        {"a": {"in": [1, "x"]}},
        {"a": {"prefix": "x"}},
        {"a": {"ge": 2, "le": 1}},
        {"a": {"eq": True}},
    ]
)


def _holds(op: str, bound: Any, v: object) -> bool:
    """One operator, as the policy reference's table says (the values here hold no float that
    equals an integer, so a type and ``==`` decide equality)."""
    if op in ("eq", "in"):
        return any(type(v) is type(m) and v == m for m in (bound if op == "in" else [bound]))
    if op == "prefix":
        return isinstance(v, str) and v.startswith(bound)
    number: Any = v
    return (
        type(v) in (int, float) and {"le": number <= bound, "lt": number < bound, "ge": number >= bound}[op]
    )


def _oracle_covers_call(pattern: str, action: str, spec: dict[str, dict[str, Any]], call: Call) -> bool:
    return (
        _oracle_matches(pattern, call.resource)
        and action in ("*", call.action)
        and all(
            name in call.args and all(_holds(op, bound, call.args[name]) for op, bound in ops.items())
            for name, ops in spec.items()
        )
    )


@settings(max_examples=120, deadline=None, derandomize=True)
@given(
    st.tuples(st.sampled_from(PATTERNS), st.sampled_from(ACTIONS), SPECS),
    st.tuples(st.sampled_from(PATTERNS), st.sampled_from(ACTIONS), SPECS),
)
def test_attenuates_agrees_with_brute_force_over_resource_action_and_arguments(
    parent: tuple[str, str, dict[str, dict[str, Any]]], child: tuple[str, str, dict[str, dict[str, Any]]]
) -> None:
    """Review R64: over every call of a domain of resources, actions (``invoke``, ``read``, one
    no capability names) and argument values (missing included), ``attenuates`` holds exactly
    when each call the child covers, the parent covers: resource, action and constraints
    together, and a child that covers nothing (``a>=2&a<=1``) attenuates any parent."""
    resources = [r for r in _resources(parent[0], child[0]) if _oracle_canonical(r)]
    values: list[object] = [0, 0.5, 1, 2, True, "x", "xy", "y"]
    calls = [
        Call(r, action, {} if value is None else {"a": value})
        for r in resources
        for action in ("invoke", "read", "other")
        for value in [*values, None]
    ]
    expected = all(_oracle_covers_call(*parent, call) for call in calls if _oracle_covers_call(*child, call))
    assert (
        attenuates(
            Capability.of(parent[0], parent[1], parent[2]), Capability.of(child[0], child[1], child[2])
        )
        is expected
    )
