"""Every flag is refused by one rule, ``require_flag``: ``ToolLimits`` (``idempotent``,
``takes_idempotency_key``) and ``ToolCall`` (``key_reaches_tool``, ``keep_error_text``,
``reuse_result``) quote a wrong value as ``shown`` does, as ``submit``'s ``preemptible`` does.
Until review R86c their own checks wrote the whole ``repr``: a bare ``ValueError`` for an integer
past 4,300 digits and 10 MB of message for a 10 MB string."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agentgate.errors import InputError
from agentgate.tasks import ToolCall, ToolLimits

HOSTILE: list[Any] = [10**5000, "f" * 10_000_000]

MAKERS: list[tuple[str, Callable[[Any], object]]] = [
    ("scheduler configuration: idempotent", lambda flag: ToolLimits(idempotent=flag)),
    ("scheduler configuration: takes_idempotency_key", lambda flag: ToolLimits(takes_idempotency_key=flag)),
    ("tool call key_reaches_tool", lambda flag: ToolCall("t", key_reaches_tool=flag)),
    ("tool call keep_error_text", lambda flag: ToolCall("t", keep_error_text=flag)),
    ("tool call reuse_result", lambda flag: ToolCall("t", reuse_result=flag)),
]


@pytest.mark.parametrize("flag", HOSTILE, ids=["huge int", "10 MB text"])
@pytest.mark.parametrize(("where", "make"), MAKERS, ids=[where for where, _ in MAKERS])
def test_a_hostile_flag_is_refused_naming_the_field_in_a_short_message(
    where: str, make: Callable[[Any], object], flag: Any
) -> None:
    with pytest.raises(InputError, match=f"^{where} must be True or False, got ") as caught:
        make(flag)
    assert len(str(caught.value)) < 200


@pytest.mark.parametrize(("where", "make"), MAKERS, ids=[where for where, _ in MAKERS])
def test_a_huge_integer_flag_is_named_by_its_size_and_text_by_its_type(
    where: str, make: Callable[[Any], object]
) -> None:
    with pytest.raises(InputError, match=rf"^{where} must be True or False, got an integer of \d+ bits$"):
        make(10**5000)
    with pytest.raises(InputError, match=f"^{where} must be True or False, got a str$"):
        make("false")


def test_true_and_false_are_still_taken() -> None:
    assert ToolLimits(idempotent=True, takes_idempotency_key=False).idempotent is True
    call = ToolCall("t", key_reaches_tool=False, keep_error_text=True, reuse_result=True)
    assert (call.key_reaches_tool, call.keep_error_text, call.reuse_result) == (False, True, True)
