"""Review R88: ``DispatchedChatModel`` read a whole answer's ``tool_calls`` with ``or []``, so a
falsy value that is no list (``{}``, ``0``, ``false``, ``""``) was no tool calls while
``{"a": 1}`` was ``BackendFailed``: the twin of the stream reader's fix (a delta's falsy
``tool_calls`` is malformed). Absent or ``null`` alone is none now; anything else that is not a
list is ``BackendFailed`` naming the backend."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage

from agentgate.dispatch._answers import ChatResult, Usage
from agentgate.errors import BackendFailed
from agentgate.integrations.langgraph._models import DispatchedChatModel

_ABSENT = object()


def _served(tool_calls: object) -> ChatResult:
    message: dict[str, Any] = {"role": "assistant", "content": "hi"}
    if tool_calls is not _ABSENT:
        message["tool_calls"] = tool_calls
    body = {
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1},
    }
    return ChatResult("b0", "hi", "stop", Usage(1, 1), body)


@pytest.mark.parametrize(
    "tool_calls", [{}, 0, False, "", {"a": 1}], ids=["object", "zero", "false", "text", "truthy"]
)
def test_tool_calls_that_are_not_a_list_are_backend_failed_falsy_or_not(tool_calls: object) -> None:
    with pytest.raises(BackendFailed, match=r"^b0: tool_calls is not a list"):
        DispatchedChatModel._result(_served(tool_calls))


@pytest.mark.parametrize("tool_calls", [_ABSENT, None, []], ids=["absent", "null", "empty-list"])
def test_absent_null_or_empty_tool_calls_are_none(tool_calls: object) -> None:
    message = DispatchedChatModel._result(_served(tool_calls)).generations[0].message
    assert isinstance(message, AIMessage) and message.content == "hi"
    assert message.tool_calls == [] and message.invalid_tool_calls == []
