"""The canonical JSON of tokens: the orjson fast path accepts exactly what the reference check accepts."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from agentgate.authority._encoding import _parse_canonical_reference, canonical_json, parse_canonical
from agentgate.errors import TokenFormatError

KEYS = st.text(max_size=6)
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
VALUES = st.recursive(
    LEAVES, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=3), max_leaves=8
)
OBJECTS = st.dictionaries(KEYS, VALUES, max_size=4)


def _verdict(parse: object, data: bytes) -> object:
    try:
        return ("ok", parse(data, "payload"))  # type: ignore[operator]
    except TokenFormatError:
        return "refused"


@settings(max_examples=400, deadline=None)
@given(OBJECTS, st.sampled_from(["canonical", "spaced", "unsorted", "ascii", "duplicate"]))
def test_fast_path_agrees_with_the_reference(value: dict[str, object], spelling: str) -> None:
    if spelling == "canonical":
        try:
            data = canonical_json(value)
        except (TokenFormatError, TypeError, ValueError):
            data = json.dumps(value).encode()
    elif spelling == "spaced":
        data = json.dumps(value, sort_keys=True, ensure_ascii=False).encode("utf-8", "surrogatepass")
    elif spelling == "unsorted":
        data = json.dumps(
            dict(reversed(list(value.items()))), separators=(",", ":"), ensure_ascii=False
        ).encode("utf-8", "surrogatepass")
    elif spelling == "ascii":
        data = json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
    else:
        body = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)[1:-1]
        data = ("{" + body + ("," if body else "") + '"k":1,"k":1}').encode("utf-8", "surrogatepass")
    assert _verdict(parse_canonical, data) == _verdict(_parse_canonical_reference, data)


def test_floats_and_duplicates_are_refused_on_both_paths() -> None:
    for data in (b'{"a":1.5}', b'{"a":1,"a":1}', b'{"a": 1}', b'{"b":1,"a":2}', b'{"a":1}x'):
        assert _verdict(parse_canonical, data) == "refused"
    assert _verdict(parse_canonical, b'{"a":1,"b":[true,null,"x"]}') == (
        "ok",
        {"a": 1, "b": [True, None, "x"]},
    )
