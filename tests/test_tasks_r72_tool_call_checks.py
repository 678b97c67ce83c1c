"""``ToolCall``'s checks run in its ``__init__`` on the values given (review R72: no
``__post_init__`` call and no read of each field just stored, on the scheduler's hot path). The
quick test there must send every value the full field-by-field checks (``_check_fields``) refuse
to them, and refuse with their message; what they accept is made."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from agentgate.errors import InputError
from agentgate.tasks import ToolCall
from agentgate.tasks._call import _check_time

#: Per field, values to try one at a time: accepted and refused ones, the edge cases of each check.
CANDIDATES: dict[str, list[Any]] = {
    "tool": ["t", "", "_other", 3, None, b"t", "caf\u00e9", "\udcff", ["t"]],
    "arguments": [{}, {"a": 1}, None, [("a", 1)], "a"],
    "tenant": ["acme", "", 3, None, "\u00e9", "\udcff"],
    "principal": ["bob", 3, None, "\udcff"],
    "priority": [None, "batch", 3, b"batch", "\udcff"],
    "run_id": [None, "r", "", 0, False, 3, "\u00e9", "\udcff"],
    "call_id": [None, "c", 0, "\udcff"],
    "deadline": [None, 1.5, 10, float("nan"), True, "soon", 10**400],
    "grant_expires_at": [None, 2.5, float("nan"), False, "later"],
    "authority_chain": [(), ("g1", "g2"), ["g1"], "g1", ("g1", 3), (3,), 7, ("\udcff",), ("\u00e9",)],
    "breaker_key": [None, "backend:x", "tool:_other", 3, "\udcff"],
    "arguments_digest": [None, "ab", 3, "\udcff"],
    "key_reaches_tool": [True, False, 1, 0, None, "yes"],
    "keep_error_text": [True, False, 1, None],
    "reuse_result": [True, False, 0, "no"],
    "pauses": [None, callable, True, "x"],
    "holder": [None, "did:key:z", 3, "\udcff"],
}


def _checked_field_by_field(values: dict[str, Any]) -> str | None:
    """What the full checks say of ``values``: the ``InputError`` message, None when accepted."""
    call = object.__new__(ToolCall)
    call.__dict__.update({f.name: f.default for f in dataclasses.fields(ToolCall)}, arguments={})
    call.__dict__.update(values)
    try:
        call._check_fields()
    except InputError as exc:
        return str(exc)
    return None


def _made(values: dict[str, Any]) -> str | None:
    try:
        ToolCall(**values)
    except InputError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize("name", sorted(CANDIDATES))
def test_the_quick_check_refuses_what_the_full_checks_refuse(name: str) -> None:
    """Review R72: ``__init__`` checks its arguments instead of calling ``__post_init__`` to
    read them back; a value of any one field is refused exactly when, and as, the field-by-field
    checks refuse it (or, for the times, when ``deadline``/``grant_expires_at`` are refused)."""
    for value in CANDIDATES[name]:
        values = {"tool": "t", name: value}
        expected = _checked_field_by_field(values)
        if expected is None and name in ("deadline", "grant_expires_at"):
            expected = _time_refusal(value, name)
        assert _made(values) == expected, (name, value)


def test_two_bad_fields_are_refused_as_the_full_checks_name_the_first() -> None:
    """Review R72: with two fields wrong, the message is the full checks' (the first they meet)."""
    names = sorted(CANDIDATES)
    for first in names:
        for second in names:
            if first >= second or "deadline" in (first, second) or "grant_expires_at" in (first, second):
                continue
            values = {"tool": "t", first: CANDIDATES[first][-1], second: CANDIDATES[second][-1]}
            assert _made(values) == _checked_field_by_field(values), values


def test_a_list_authority_chain_is_taken_as_a_tuple() -> None:
    """Review R72: the conversion the full checks make still happens when the quick one sends them."""
    assert ToolCall("t", authority_chain=["g1", "g2"]).authority_chain == ("g1", "g2")  # type: ignore[arg-type]


def _time_refusal(value: object, name: str) -> str | None:
    try:
        _check_time(value, name)
    except InputError as exc:
        return str(exc)
    return None
