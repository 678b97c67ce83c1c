"""What agentgate's two canonical JSON encoders share (tokens: ``authority._encoding``; audit
entries: ``audit.entry``): knowing when orjson's sorted output already is the canonical form; the
canonical JSON of entries' arguments, invocations' calls, approvals and spans (``canonical_json``,
here since review R81 rather than in ``audit.entry``, so that deciding a grant imports neither the
audit entry model nor Pydantic); and
what the readers of a call's arguments as JSON text share (the command line's ``--args``, a
LangGraph tool call's arguments as the model wrote them): finding a number no float holds as
written (``exact_float``, ``first_inexact``, ``inexact_argument``, ``inexact_read``); and what every strict reader of
JSON shares (tokens, ``--args``, the gateway's request bodies, approval payloads): refusing an
object that gives a key twice (``once_each``)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

import orjson

from agentgate._shown import quoted
from agentgate.errors import InputError

SCALARS = frozenset({str, int, bool, type(None)})
"""The scalar types (exact) orjson writes byte for byte as the reference encoder does (``is_plain``),
but for a lone surrogate and an integer beyond 64 bits, which orjson refuses."""
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
    scalars = SCALARS
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


INT64 = 2**63
"""A whole float in ``-INT64 <= value < INT64``, a 64-bit integer's range, is read as the integer
it is; past it, not: vLLM's lax pydantic stops there, and no count of tokens, seed or store column
goes beyond it."""


def integral(value: object) -> object:
    """A float with no fractional part within a 64-bit integer's range (``-INT64`` to
    ``INT64 - 1``) as the integer it is (``512.0`` is 512, as vLLM and OpenAI's API read a JSON
    number); anything else as it is, for the caller's own check to judge. The one reading of such
    numbers (review R81: the simulated backend, the dispatcher and the LangGraph middleware each
    had their copy). Until review R83 ``-2**63`` written as a float was left a float (the bound
    was ``abs(value) < INT64``), so a ``seed`` of ``-9223372036854775808.0`` was refused where the
    same integer was taken."""
    if isinstance(value, float) and value.is_integer() and -INT64 <= value < INT64:
        return int(value)
    return value


class Inexact:
    """A JSON number that no float holds as written, as ``exact_float`` parsed it (its text)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def exact_float(text: str) -> float | Inexact:
    """The float a JSON number with a fraction or an exponent is (``json.loads``'s
    ``parse_float``), or ``Inexact`` when its value as written is not the float's
    (``100.00000000000000001`` is read as ``100.0``, ``1e-400`` as ``0.0``): a bound
    ``amount<=100`` would be checked against another value than the one given. A float holds as
    written its shortest decimal form (``repr``: ``0.1`` stays ``0.1``) and its exact binary value
    written out in full (``9.223372036854775808e18`` is 2**63, whose shortest form is
    ``9.223372036854776e18``; until review R56 it was refused as a number no float holds). An
    infinite one is left to the caller's check of values JSON cannot carry. (Integers are
    Python's, exact at any size.)"""
    value = float(text)
    if not math.isfinite(value):
        return value
    try:
        written = Decimal(text)
    except InvalidOperation:
        # An exponent past what a Decimal holds (``1e-99999999999999999999``, read as 0.0): as
        # written it is that float only with no digit but 0 before it (until reading review
        # R85 a bare ``decimal.InvalidOperation`` out of the arguments' check).
        digits = text.lower().partition("e")[0]
        return value if not digits.strip("+-.0") else Inexact(text)
    if written != Decimal(repr(value)) and written != Decimal(value):
        return Inexact(text)
    return value


def first_inexact(value: object) -> tuple[str, str] | None:
    """The first ``Inexact`` number in ``value`` (as parsed with ``exact_float``): its path inside
    the objects and lists (``'amount'``, ``'items'[0]'price'``) and its text; ``None`` when there
    is none. Walked without recursion, as the parser nests, one container open per level: a path
    is a (parent path, key or position) pair as ``check_json`` keeps it, written out only for the
    number found (until review R86 each element's path was written out before it was looked at,
    so a deep and wide value took its depth times its size in memory)."""
    if isinstance(value, Inexact):
        return "", value.text
    # (the container's children not yet looked at, the container's path)
    stack: list[tuple[Iterator[tuple[Any, object]], Any]] = [(_children(value), "")]
    while stack:
        children, path = stack[-1]
        for key, item in children:
            if isinstance(item, Inexact):
                return _argument_path((path, key)), item.text
            if isinstance(item, dict | list):
                stack.append((_children(item), (path, key)))
                break
        else:
            stack.pop()
    return None


def _children(item: object) -> Iterator[tuple[Any, object]]:
    """An object's keys and values, or a list's positions and elements; nothing for a scalar."""
    if isinstance(item, dict):
        return iter(item.items())
    if isinstance(item, list):
        return enumerate(item)
    return iter(())


def inexact_said(path: str, text: str | None) -> str:
    """Why an argument at ``path`` written as the number ``text`` (``first_inexact``) is refused;
    with ``None``, the same without the number, nor what it would be read as: as the audit log
    records it for an argument the policy does not mark loggable (until review R82 the LangGraph
    middleware's ``deny`` entry quoted it)."""
    if text is None:
        return f"argument {path} is a number no float holds as written; give it with fewer digits, or as text"
    return (
        f"argument {path} is {text[:40]}, a number no float holds as written "
        f"(it would be read as {float(text)!r}); give it with fewer digits, or as text"
    )


def inexact_argument(text: str, parsed: object) -> tuple[object, str, str] | None:
    """Where arguments written as the JSON text ``text`` and read as ``parsed`` hold a number no
    float holds as written: the first such number's argument (its key in the arguments' object;
    ``None`` when they are no object), its path and its text (``first_inexact``; ``inexact_said``
    words the refusal), when ``parsed`` is what plain JSON reads from ``text`` (the value decided
    was read from that text, rounded); ``None`` otherwise, and for text that is no JSON (its
    reader refuses it on its own). Read as LangChain reads a tool call's arguments
    (``strict=False``: control characters in strings)."""
    try:
        exact = json.loads(text, parse_float=exact_float, strict=False)
    except (ValueError, RecursionError):
        return None
    return inexact_read(text, exact, parsed)


def inexact_read(text: str, exact: object, parsed: object) -> tuple[object, str, str] | None:
    """``inexact_argument`` of arguments the caller has read already from ``text`` with
    ``exact_float`` as ``exact`` (the LangGraph middleware, which reads them once for this and
    for its check that they are one object, ``_unusable_answer``)."""
    found = first_inexact(exact)
    if found is None:
        return None
    try:
        plain = json.loads(text, strict=False)
    except (ValueError, RecursionError):
        return None
    if plain != parsed:
        return None
    holder = (
        next((k for k, v in exact.items() if first_inexact(v) is not None), None)
        if isinstance(exact, dict)
        else None
    )
    return (holder, *found)


def once_each(refused: Callable[[str], Exception]) -> Callable[[list[tuple[str, Any]]], dict[str, Any]]:
    """A ``json.loads`` ``object_pairs_hook`` that reads an object whose keys are each given once,
    and raises ``refused(key)`` for the first key given again: readers differ on which of two
    values counts (Python's parser keeps the last, a viewer or a proxy may show the first)."""

    def hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        value = dict(pairs)
        if len(value) != len(pairs):
            seen: set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    raise refused(key)
                seen.add(key)
        return value

    return hook


MAX_DEPTH = 254
"""The deepest nesting of arrays and objects a canonical JSON value may have (the value itself
counts as one level). It is orjson's own limit, so the fast path and the reference path accept
exactly the same values; deeper ones are an ``InputError``, not a ``RecursionError``."""


def canonical_json(value: Any) -> bytes:
    """Sorted-key, whitespace-free UTF-8 JSON; raises ``InputError`` on values JSON cannot hold.

    Finite floats are written in Python's shortest round-trip form; NaN and infinities are refused,
    as are values nested more than ``MAX_DEPTH`` levels deep.
    """
    if is_plain(value):
        try:
            return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:
            pass  # a lone surrogate or an integer beyond 64 bits: the reference encoder decides
    check_json(value, "$")
    return encode_reference(value)


def encode_reference(value: Any) -> bytes:
    """The reference encoder's bytes for ``value`` (``json.dumps`` with sorted keys, no spaces,
    UTF-8); ``InputError`` if it cannot be written. Callers check the value first (``check_json``)."""
    try:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InputError(f"value cannot be encoded as canonical JSON: {exc}") from exc
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate: text that is not Unicode scalar values
        raise InputError(f"value holds text that is not valid Unicode (position {exc.start})") from None


def check_json(value: Any, where: str, max_depth: int | None = MAX_DEPTH) -> None:
    """Return if ``value`` is JSON that canonical encoding can write; ``InputError`` naming where not.

    Walks the value without recursion, so a value nested deeper than ``max_depth`` is refused
    with an ``InputError`` (never a ``RecursionError``, whatever the caller's stack depth);
    ``None`` bounds nothing (a stored entry, which the parser has already read).
    """
    _check_scalar(value, where)
    # (container, path, depth): a path is ``where`` or a (parent path, key or position) pair,
    # formatted only for an error message.
    stack: list[tuple[Any, Any, int]] = (
        [(value, where, 0)] if isinstance(value, list | tuple | Mapping) else []
    )
    while stack:
        item, path, depth = stack.pop()
        if max_depth is not None and depth >= max_depth:
            raise InputError(f"{_path(path)}: nested more than {max_depth} levels deep")
        if isinstance(item, Mapping):
            for key in item:
                if not isinstance(key, str):
                    # Quoted, not repr'd: until review R86d a key of 10**5000 (or a tuple nested
                    # 100,000 deep) made this refusal a bare ValueError (RecursionError), and
                    # (1,) * 100000 wrote 300 KB of message.
                    raise InputError(f"{_path(path)}: object key {quoted(key)} is not a string")
            children: Iterable[tuple[Any, Any]] = item.items()
        else:
            children = enumerate(item)
        for key, sub in children:
            if sub is None or isinstance(sub, bool | int | str):
                continue
            if isinstance(sub, list | tuple | Mapping):
                stack.append((sub, (path, key), depth + 1))
            else:
                _check_scalar(sub, (path, key))


def _check_scalar(value: Any, path: Any) -> None:
    """Refuse a float JSON cannot hold, or a value of a type it has no form for (containers pass)."""
    if value is None or isinstance(value, bool | int | str | list | tuple | Mapping):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InputError(f"{_path(path)}: {value} cannot be encoded as JSON")
        return
    raise InputError(f"{_path(path)}: a {type(value).__name__} cannot be encoded as JSON")


def _path(path: Any) -> str:
    """``$.a[0]``-style text of a path built by ``check_json``, cut to 80 characters."""
    where, keys = _unwound(path)
    text = str(where) + "".join(f"[{key}]" if isinstance(key, int) else f".{key}" for key in keys)
    return text if len(text) <= 80 else text[:77] + "..."


def _argument_path(path: Any) -> str:
    """``'items'[0]'price'``-style text of a path built by ``first_inexact`` (from ``""``)."""
    _, keys = _unwound(path)
    return "".join(f"[{key}]" if isinstance(key, int) else repr(key) for key in keys)


def _unwound(path: Any) -> tuple[Any, list[Any]]:
    """A path kept as (parent path, key or position) pairs (``check_json``, ``first_inexact``)
    as where it starts and its keys and positions from there in order."""
    keys: list[Any] = []
    while isinstance(path, tuple):
        path, key = path
        keys.append(key)
    keys.reverse()
    return path, keys
