"""The canonical JSON of a call's arguments (agentgate/_json.py): the authority engine's digest and
the audit log's use one encoder, so they agree on every value or both refuse it with a typed error."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgate.audit.entry import MAX_DEPTH, argument_digest
from agentgate.authority._invocation import args_digest
from agentgate.errors import InputError, TokenFormatError


def test_a_call_whose_arguments_hold_a_cycle_is_a_typed_error_not_a_hang() -> None:
    """``agentgate/_json.py`` ``is_plain`` walks containers with a stack and no visited set: a
    dict that holds itself loops for ever (it never grows the stack, so no MemoryError either).
    ``args_digest`` (authority) and ``argument_digest`` (audit) call it first, so
    ``Gate.authorize(agent, Call.model("m", {"x": cyclic}))`` hangs inside
    ``Authority.decide_held``, within the decision's open store transaction. Model arguments are
    not declared, so the policy lets such a value through. The reference encoder would refuse it
    ("Circular reference detected"). Run in a child process: on the current code it never ends."""
    script = (
        "from agentgate.authority import args_digest\n"
        "from agentgate.errors import TokenFormatError\n"
        "a = {}; a['x'] = a\n"
        "try:\n    args_digest({'a': a})\nexcept TokenFormatError:\n    print('refused')\n"
    )
    try:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        raise AssertionError("args_digest of a cyclic value never returned") from None
    assert done.stdout.strip() == "refused", done.stderr[-300:]


def _nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth - 1):
        value = [value]
    return value


def _digests(args: dict[Any, Any]) -> tuple[str | None, str | None]:
    try:
        authority: str | None = "sha256:" + args_digest(args)
    except TokenFormatError:
        authority = None
    try:
        audit: str | None = argument_digest(args)
    except InputError:
        audit = None
    return authority, audit


scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=4),
    st.sampled_from(["\ud800", "\x00", "é"]),
)  # fmt: skip


values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner, inner),
        st.dictionaries(st.one_of(st.text(max_size=3), st.integers(0, 3)), inner, max_size=3),
    ),
    max_leaves=12,
)


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.one_of(st.text(max_size=3), st.integers(0, 3)), values, max_size=4))
def test_the_two_digests_agree_or_both_refuse(args: dict[Any, Any]) -> None:
    authority, audit = _digests(args)
    assert authority == audit


@pytest.mark.parametrize("depth", [MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, 300])
def test_the_two_digests_agree_at_the_nesting_limit(depth: int) -> None:
    authority, audit = _digests({"a": _nested(depth)})
    assert authority == audit
    assert (authority is None) == (depth > MAX_DEPTH)  # depth - 1 lists, and the args object
