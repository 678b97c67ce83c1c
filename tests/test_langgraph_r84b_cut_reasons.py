"""Review R84 (regression): the refusal of a tool call of an answer cut or filtered quoted the
provider's reason whole, so a stream that set its finish reason on every chunk (LangChain
concatenates it: ``lengthlength...``) made a refusal of megabytes, told to the model and recorded
in the ``deny`` entry, and an ``incomplete_details.reason`` of 100 KB likewise. The reason is now
said once, bounded (``MAX_REASON_SHOWN``) and escaped. And Gemini's ``IMAGE_SAFETY`` (with
``IMAGE_PROHIBITED_CONTENT``, ``IMAGE_RECITATION``), Mistral's ``model_length`` and Anthropic's
``model_context_window_exceeded`` are reasons the gate knows, where such an answer's calls ran."""

from __future__ import annotations

import pytest
from _langgraph_openai_rig import Rig
from _langgraph_openai_rig import rig as rig  # the fixture
from langchain_core.messages import AIMessage, ToolMessage
from test_langgraph_r84b_index_reuse import _call, _chunk, _run

from agentgate.integrations.langgraph._scope import MAX_REASON_SHOWN, _cut_answer

CALL = [{"name": "refund", "args": {"amount": 1}, "id": "c1", "type": "tool_call"}]


def _said(**metadata: object) -> str | None:
    return _cut_answer(AIMessage("", tool_calls=CALL, response_metadata=metadata))


@pytest.mark.parametrize(
    ("metadata", "said"),
    [
        ({"finish_reason": "IMAGE_SAFETY"}, "stopped by its provider's filter (IMAGE_SAFETY)"),
        (
            {"finish_reason": "IMAGE_PROHIBITED_CONTENT"},
            "stopped by its provider's filter (IMAGE_PROHIBITED_CONTENT)",
        ),
        ({"finish_reason": "IMAGE_RECITATION"}, "stopped by its provider's filter (IMAGE_RECITATION)"),
        ({"finish_reason": "model_length"}, "cut at its output limit (model_length)"),
        (
            {"stop_reason": "model_context_window_exceeded"},
            "cut at its output limit (model_context_window_exceeded)",
        ),
    ],
)
def test_these_reasons_refuse_the_answers_calls(metadata: dict[str, object], said: str) -> None:
    refused = _said(**metadata)
    assert refused is not None and said in refused  # until the fix: None, and the calls ran


def test_a_reason_said_on_every_chunk_is_said_once() -> None:
    refused = _said(finish_reason="length" * 200_000)  # until the fix: 1.2 MB
    assert refused is not None and "(length)" in refused and len(refused) < 300


def test_a_long_reason_is_bounded_and_escaped() -> None:
    reason = "".join(f"reason {n}\n" for n in range(10_000))
    refused = _said(status="incomplete", incomplete_details={"reason": reason})
    assert refused is not None and "marked incomplete (reason 0\\nreason 1" in refused
    assert "characters left out" in refused and "\n" not in refused
    assert len(refused) < 2 * MAX_REASON_SHOWN + 200


def test_the_model_and_the_log_are_told_the_reason_once(rig: Rig) -> None:
    # The real ChatOpenAI, streamed: a server that sends its finish reason on each of many chunks.
    first = [
        _chunk({"role": "assistant", "content": None, "tool_calls": [_call("call_a", '{"amount": 1')]}),
        *(_chunk(finish="length") for _ in range(3000)),
    ]
    messages = _run(rig, first, "invoke")
    (answer, *_) = (m for m in messages if isinstance(m, AIMessage))
    assert answer.response_metadata["finish_reason"] == "length" * 3000
    (result,) = (m for m in messages if isinstance(m, ToolMessage))
    assert rig.ran == [] and result.status == "error"
    assert "cut at its output limit (length)" in str(result.content) and len(str(result.content)) < 300
    (reason,) = rig.denied()
    assert "(length)" in reason and len(reason) < 300
