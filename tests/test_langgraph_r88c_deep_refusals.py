"""Review R88c: ``DispatchedChatModel`` quoted a whole answer's ``tool_calls`` that is no list, and
a ``reasoning_content`` (or ``reasoning``) that is no string, with ``repr``: one nested 1,000 deep
(orjson reads 1,024 levels, so ``BackendClient.chat`` reads it) was a bare ``RecursionError`` out
of the refusal. Each is ``BackendFailed`` naming the backend now, quoted as ``quoted`` does."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from agentgate.dispatch._answers import ChatResult, Usage
from agentgate.errors import BackendFailed
from agentgate.integrations.langgraph._models import DispatchedChatModel

DEEP = orjson.loads('{"a":' * 1000 + "1" + "}" * 1000)


def _served(**fields: Any) -> ChatResult:
    message = {"role": "assistant", "content": "hi", **fields}
    body = {
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1},
    }
    return ChatResult("b0", "hi", "stop", Usage(1, 1), body)


def test_tool_calls_nested_too_deep_are_backend_failed() -> None:
    with pytest.raises(
        BackendFailed, match=r"^b0: tool_calls is not a list: a dict nested too deep to write$"
    ):
        DispatchedChatModel._result(_served(tool_calls=DEEP))


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_nested_too_deep_is_backend_failed(field: str) -> None:
    with pytest.raises(
        BackendFailed, match=rf"^b0: {field} is not a string: a dict nested too deep to write$"
    ):
        DispatchedChatModel._result(_served(**{field: DEEP}))


def test_a_long_reasoning_that_is_no_string_is_quoted_short() -> None:
    with pytest.raises(BackendFailed) as refused:
        DispatchedChatModel._result(_served(reasoning_content=["x" * 100_000]))
    assert len(str(refused.value)) < 150
