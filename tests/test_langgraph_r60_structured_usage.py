"""Review R60: a model call whose structured answer (``create_gated_agent(response_format=...)``)
LangChain could not parse is charged the usage the model reported with that answer, and its
outcome says why it failed; until then it was charged as reserved, its outcome saying its usage
could not be read, though the answer reported it (LangChain's ``StructuredOutputError`` carries
the answer, ``ai_message``, and its ``usage_metadata``)."""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents.structured_output import ProviderStrategy, StructuredOutputValidationError, ToolStrategy
from langchain_core.messages import AIMessage
from test_langgraph_r59b_structured_output import HUGE, Refund, _Structured, _structured
from test_langgraph_r59b_structured_output import structured as structured  # the fixture


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize(
    ("turns", "response_format"),
    [
        ([AIMessage(content='{"order_id": ')], ProviderStrategy(Refund)),
        ([_structured({"order": 1})], ToolStrategy(Refund, handle_errors=False)),
        ([_structured({"order_id": "O-1", "amount": HUGE})], ToolStrategy(Refund, handle_errors=False)),
    ],
    ids=["invalid-json", "wrong-shape", "beyond-64-bits"],
)
def test_an_unparsable_structured_answer_is_charged_the_usage_it_reported(
    structured: _Structured, turns: list[AIMessage], response_format: Any, mode: str
) -> None:
    """Review R60, charged as reserved with "its usage could not be read" though it was reported."""
    with pytest.raises(StructuredOutputValidationError) as raised:
        structured.run(turns, response_format, mode=mode)
    usage = raised.value.ai_message.usage_metadata
    assert usage is not None
    [allow, outcome] = structured.entries()
    assert (outcome.kind, outcome.status, outcome.ref) == ("outcome", "error", allow.index)
    assert list(outcome.reasons) == ["StructuredOutputValidationError"]  # nothing about unread usage
    assert outcome.budget_delta == usage["input_tokens"] + usage["output_tokens"]
    assert outcome.budget_delta < allow.budget_delta  # not the reservation
