"""The quick scan for integers beyond 64 bits that every model answer and tool result goes through
(``_holds_out_of_range``) finds exactly what the path-building walk finds: review R60 put it in
front of ``_integers_out_of_range`` (about 45 us per answer walked for nothing, in the usual case
where there is none), so a scan that missed one would let LangGraph's checkpointer fail again."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from agentgate.integrations.langgraph._tool_calls import (
    INT_RANGE,
    _holds_out_of_range,
    _integers_out_of_range,
)

EDGES = st.sampled_from([INT_RANGE - 1, INT_RANGE, -INT_RANGE + 1, -INT_RANGE, 2**64, -(2**80), 0, 1])
LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(), EDGES, st.text(max_size=4), st.floats(allow_nan=False)
)
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(st.text(max_size=3), inner, max_size=4),
    ),
    max_leaves=20,
)


def _reference(value: Any) -> list[int]:
    """Every integer (not a boolean) out of range in ``value``, by plain recursion."""
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [] if -INT_RANGE < value < INT_RANGE else [value]
    if isinstance(value, dict):
        return [i for v in value.values() for i in _reference(v)]
    if isinstance(value, list | tuple):
        return [i for v in value for i in _reference(v)]
    return []


@given(VALUES)
def test_the_quick_scan_and_the_walk_find_what_recursion_finds(value: Any) -> None:
    expected = _reference(value)
    assert _holds_out_of_range(value) is bool(expected)
    assert sorted(i for _, i in _integers_out_of_range(value)) == sorted(expected)


def test_the_boundaries_and_booleans() -> None:
    assert not _holds_out_of_range({"a": [INT_RANGE - 1, -INT_RANGE + 1, True, False, "9" * 30]})
    assert _holds_out_of_range({"a": [0, {"b": (INT_RANGE,)}]})
    assert _holds_out_of_range([[-INT_RANGE]])
    assert _integers_out_of_range({"a": [0, {"b": (INT_RANGE,)}]}) == [(("a", 1, "b", 0), INT_RANGE)]
