"""Review R88: an answer whose ``usage_metadata`` leaves out a token count reports no usage, and
the model call is charged what it reserved, as the gateway charges a usage without
``completion_tokens`` (``dispatch._answers.reports_usage``). Until then a count left out was read
as 0: an answer under 1,024 characters whose usage named no ``output_tokens`` had its output free.
LangChain's ``AIMessage`` checks both counts when it is made; a chat model or middleware that
edits its ``usage_metadata`` afterwards, or answers with another message type, can leave one out."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessage

from agentgate.integrations.langgraph._calls import _tokens_used


def _answer_leaving_out(count: str) -> AIMessage:
    answer = AIMessage(
        content="ok", usage_metadata={"input_tokens": 7, "output_tokens": 3, "total_tokens": 10}
    )
    assert answer.usage_metadata is not None
    del answer.usage_metadata[count]  # type: ignore[misc]
    return answer


@pytest.mark.parametrize("count", ["output_tokens", "input_tokens"])
def test_a_usage_that_leaves_out_a_count_reports_none(count: str) -> None:
    assert _tokens_used(_answer_leaving_out(count)) is None


def test_a_usage_that_names_both_counts_is_read() -> None:
    assert _tokens_used(_answer_leaving_out("total_tokens")) == (7, 3)
