"""What agentgate's two canonical JSON encoders share (tokens: ``authority._encoding``; audit
entries: ``audit.entry``): knowing when orjson's sorted output already is the canonical form."""

from __future__ import annotations

from typing import Any

_SCALARS = frozenset({str, int, bool, type(None)})
MAX_PLAIN_CONTAINERS = 100_000
"""Past this many dicts and lists a value takes the reference path: a value that holds itself
(a cycle) is then refused there ("Circular reference detected") instead of walked for ever."""


def is_plain(value: Any) -> bool:
    """Whether ``value`` is built only of dicts with string keys, lists, strings, integers,
    booleans and ``None`` (exact types). For these values orjson's sorted output is byte for byte
    the reference encoding (``json.dumps(sort_keys=True, separators=(",", ":"),
    ensure_ascii=False)``): the same escapes, keys sorted by code point (which UTF-8 byte order
    preserves), integers in plain decimal. Floats, tuples and subclasses take the reference path,
    as does a value of more than ``MAX_PLAIN_CONTAINERS`` dicts and lists (a cycle never ends)."""
    stack: list[Any] = [value]
    scalars = _SCALARS
    budget = MAX_PLAIN_CONTAINERS
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            for key in item:
                if type(key) is not str:
                    return False
            stack.extend(item.values())
        elif kind is list:
            stack.extend(item)
        elif kind in scalars:
            continue
        else:
            return False
        budget -= 1  # a dict or a list
        if budget < 0:
            return False
    return True
