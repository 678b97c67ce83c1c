"""Review R72 (helper r72-rev-d): what the changes of round R72 on main lost."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from agentgate.errors import InputError
from agentgate.tasks import ToolCall


@dataclasses.dataclass(frozen=True)
class _Labelled(ToolCall):
    """A ToolCall subclass that adds a field: the dataclass makes its ``__init__``, which sets the
    fields itself and calls ``__post_init__``, never ``ToolCall.__init__``."""

    label: str = ""


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"tool": ""}, "needs a tool name"),
        ({"tool": "t", "arguments": [("a", 1)]}, "arguments are a mapping"),
        ({"tool": "t", "tenant": 3}, "tenant and principal must be strings"),
        ({"tool": "_other"}, "is reserved"),
        ({"tool": "t", "authority_chain": "g1"}, "authority_chain must be a tuple"),
        ({"tool": "t", "reuse_result": 0}, "reuse_result must be True or False"),
        ({"tool": "t", "pauses": True}, "pauses must be a function"),
        ({"tool": "t", "deadline": float("nan")}, "deadline must be an aware datetime"),
        ({"tool": "t", "grant_expires_at": True}, "grant_expires_at must be an aware datetime"),
    ],
)
def test_a_dataclass_subclass_of_tool_call_is_checked(values: dict[str, Any], message: str) -> None:
    """Review R72: ``ToolCall.__init__`` checked its arguments inline and ``__post_init__`` went,
    so a dataclass subclass of ToolCall, whose generated ``__init__`` calls ``__post_init__``
    when the class has one, made calls with no check at all: an empty tool name, a list of
    pairs as arguments, a NaN deadline (which bounds nothing) were all accepted (each refused
    before R72)."""
    with pytest.raises(InputError, match=message):
        _Labelled(**values)


def test_a_dataclass_subclass_takes_a_list_authority_chain_as_a_tuple() -> None:
    """Review R72: as ToolCall does (and a subclass did before R72): the idempotency key reads
    the chain's last id, and a frozen call must not hold a list."""
    made = _Labelled("t", authority_chain=["g1", "g2"], label="x")  # type: ignore[arg-type]
    assert made.authority_chain == ("g1", "g2")
    assert made.label == "x"
    assert made == _Labelled("t", authority_chain=("g1", "g2"), label="x")
    assert dataclasses.replace(made, label="y").label == "y"
    with pytest.raises(InputError, match="needs a tool name"):
        dataclasses.replace(made, tool="")
