"""What agentgate's two canonical JSON encoders share (tokens: ``authority._encoding``; audit
entries: ``audit.entry``): knowing when orjson's sorted output already is the canonical form."""

from __future__ import annotations

from typing import Any

_SCALARS = frozenset({str, int, bool, type(None)})


def is_plain(value: Any) -> bool:
    """Whether ``value`` is built only of dicts with string keys, lists, strings, integers,
    booleans and ``None`` (exact types). For these values orjson's sorted output is byte for byte
    the reference encoding (``json.dumps(sort_keys=True, separators=(",", ":"),
    ensure_ascii=False)``): the same escapes, keys sorted by code point (which UTF-8 byte order
    preserves), integers in plain decimal. Floats, tuples and subclasses take the reference path."""
    stack: list[Any] = [value]
    scalars = _SCALARS
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
        elif kind not in scalars:
            return False
    return True
