"""Review R68: the scheduler's argument digest (``agentgate.tasks.argument_digest``), which the
idempotency key of a ``ToolCall`` hashes, is the canonical JSON of the arguments or an
``InputError``: never the digest of another argument set, never a bare exception."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from agentgate.errors import InputError
from agentgate.tasks import ToolCall, argument_digest


def _reference(arguments: dict[str, Any]) -> str:
    text = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _call(arguments: dict[Any, Any]) -> ToolCall:
    return ToolCall("orders", arguments, run_id="1", call_id="call_0_0")


@pytest.mark.parametrize(
    "arguments",
    [
        {},
        {"q": 1},
        {"b": [1, 2.5, None, True], "a": {"x": "é", "y": -0.0}},
        {"n": 2**70},
        {"s": "\u2028\x00"},
    ],
)
def test_the_digest_of_json_arguments_is_unchanged(arguments: dict[str, Any]) -> None:
    """Review R68: arguments that are JSON keep the digest (and so the idempotency keys) they had."""
    assert argument_digest(arguments) == _reference(arguments)


@pytest.mark.parametrize(
    ("given", "spelled"),
    [
        ({1: "a"}, {"1": "a"}),
        ({"a": {1: 2}}, {"a": {"1": 2}}),
        ({"a": [{True: 0}]}, {"a": [{"true": 0}]}),
        ({None: 1}, {"null": 1}),
        ({1.5: 1}, {"1.5": 1}),
    ],
)
def test_a_key_that_is_not_a_string_is_refused_not_read_as_its_spelling(
    given: dict[Any, Any], spelled: dict[str, Any]
) -> None:
    """Review R68: JSON writes a key that is not a string as its spelling (``1`` as ``"1"``), so
    ``{1: "a"}`` had the digest of ``{"1": "a"}``: two different calls with one run and call id
    had one idempotency key, and the second was handed the first's result. Refused, as the audit
    log's canonical JSON (``args_digest``) refuses it."""
    assert argument_digest(spelled) == _reference(spelled)
    with pytest.raises(InputError, match="is not a string"):
        argument_digest(given)
    with pytest.raises(InputError, match="is not a string"):
        _call(given).idempotency_key()


def test_text_that_is_not_unicode_is_an_input_error() -> None:
    """Review R68: a lone surrogate (what a JSON ``"\\ud800"`` escape from a model yields) raised a
    bare ``UnicodeEncodeError`` out of the digest."""
    with pytest.raises(InputError, match="not valid Unicode"):
        argument_digest({"q": "\ud800"})
    with pytest.raises(InputError, match="not valid Unicode"):
        _call({"q": ["\udcff"]}).idempotency_key()


def test_arguments_nested_without_end_are_an_input_error() -> None:
    """Review R68: arguments nested 10,000 levels deep raised a bare ``RecursionError`` out of
    the JSON encoder."""
    deep: Any = 0
    for _ in range(10_000):
        deep = [deep]
    with pytest.raises(InputError, match="nested more than"):
        argument_digest({"q": deep})
