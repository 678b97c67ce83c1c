"""Review R84: no tool call of an OpenAI Responses API answer that ended before the model
finished it runs (docs/langgraph.md, Tool calls of a cut answer). Such an answer has no
``finish_reason``: it says ``status: "incomplete"`` and ``incomplete_details.reason``
(``max_output_tokens``, ``content_filter``). Streamed, LangChain reads the cut arguments as
*partial* JSON, so ``{"amount": 50`` of what was to be 5000 became a refund of 50, allowed and
run. The real ``ChatOpenAI(use_responses_api=True)`` against a loopback Responses API server."""

from __future__ import annotations

import json
from typing import Any

import pytest
from _langgraph_openai_rig import GO, Loopback, QuietHandler, Rig, chat_openai, response
from _langgraph_openai_rig import rig as rig  # the fixture
from langchain_core.messages import AIMessage, ToolMessage
from test_cut_answers import CutModel

from agentgate.integrations.langgraph import create_gated_agent


class _ResponsesServer(Loopback):
    """A loopback Responses API endpoint, streaming: its first answer a ``refund`` call whose
    arguments stop at ``{"note": "inv-1", "amount": 50`` with ``response.incomplete`` for
    ``reason``; later answers the text ``done``."""

    def __init__(self, reason: str) -> None:
        self.answered = 0
        server = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                server.answered += 1
                n = server.answered
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                events: list[dict[str, Any]] = [
                    {"type": "response.created", "response": response(n, [], "in_progress")}
                ]
                if n == 1:
                    arguments = '{"note": "inv-1", "amount": 50'
                    item = {
                        "type": "function_call",
                        "id": "fc_1",
                        "call_id": "call_1",
                        "name": "refund",
                        "arguments": "",
                        "status": "in_progress",
                    }
                    cut = {**item, "arguments": arguments, "status": "incomplete"}
                    events += [
                        {"type": "response.output_item.added", "output_index": 0, "item": item},
                        {
                            "type": "response.function_call_arguments.delta",
                            "item_id": "fc_1",
                            "output_index": 0,
                            "delta": arguments,
                        },
                        {
                            "type": "response.incomplete",
                            "response": response(n, [cut], "incomplete", reason),
                        },
                    ]
                else:
                    text = {"type": "output_text", "text": "done", "annotations": []}
                    message = {"type": "message", "id": "m1", "role": "assistant", "status": "completed"}
                    events += [
                        {
                            "type": "response.output_item.added",
                            "output_index": 0,
                            "item": {**message, "content": [], "status": "in_progress"},
                        },
                        {
                            "type": "response.output_text.delta",
                            "item_id": "m1",
                            "output_index": 0,
                            "content_index": 0,
                            "delta": "done",
                        },
                        {
                            "type": "response.completed",
                            "response": response(n, [{**message, "content": [text]}], "completed"),
                        },
                    ]
                for number, event in enumerate(events):
                    event["sequence_number"] = number
                    self.wfile.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())

        super().__init__(Handler)


def _told(result: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in result["messages"] if isinstance(m, ToolMessage)]


@pytest.mark.parametrize(
    ("reason", "said"),
    [
        ("max_output_tokens", "cut at its output limit (max_output_tokens)"),
        ("content_filter", "stopped by its provider's filter (content_filter)"),
    ],
)
def test_a_streamed_responses_api_answer_cut_short_runs_none_of_its_calls(
    rig: Rig, reason: str, said: str
) -> None:
    server = _ResponsesServer(reason)
    try:
        model = chat_openai(server.url, use_responses_api=True, streaming=True)
        agent = create_gated_agent(rig.gate, name="boss", model=model, tools=rig.tools)
        result = agent.invoke(GO, context=rig.boss)
    finally:
        server.close()
    asked = next(m for m in result["messages"] if isinstance(m, AIMessage) and m.tool_calls)
    assert asked.tool_calls[0]["args"] == {"note": "inv-1", "amount": 50}  # partial JSON, read whole
    assert rig.ran == []  # until R84: [50.0], a refund of what was to be 5000
    (answer,) = _told(result)
    assert answer.status == "error" and said in str(answer.content)
    assert [r for r in rig.denied() if said in r] != []


def _run_scripted(rig: Rig, metadata: dict[str, Any]) -> list[ToolMessage]:
    turns = [
        AIMessage(
            content="", tool_calls=[{"name": "refund", "args": {"amount": 5, "note": "inv-1"}, "id": "c1"}]
        )
    ]
    model = CutModel(turns=turns, metadata=metadata)
    agent = create_gated_agent(rig.gate, name="boss", model=model, tools=rig.tools)
    return _told(agent.invoke(GO, context=rig.boss))


@pytest.mark.parametrize(
    ("metadata", "said"),
    [
        ({"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}, "output limit"),
        ({"status": "incomplete"}, "marked incomplete (incomplete)"),
        (
            {"status": "incomplete", "incomplete_details": {"reason": "new_reason"}},
            "marked incomplete (new_reason)",
        ),
        ({"finish_reason": "content_filter"}, "provider's filter (content_filter)"),  # OpenAI, Azure
        ({"stop_reason": "refusal"}, "provider's filter (refusal)"),  # Anthropic
        ({"finish_reason": "SAFETY"}, "provider's filter (SAFETY)"),  # Gemini
        ({"stopReason": "guardrail_intervened"}, "provider's filter (guardrail_intervened)"),  # Bedrock
    ],
)
def test_an_answer_ended_before_it_was_complete_runs_none_of_its_calls(
    rig: Rig, metadata: dict[str, Any], said: str
) -> None:
    (answer,) = _run_scripted(rig, metadata)
    assert rig.ran == []
    assert answer.status == "error" and said in str(answer.content)
    assert [r for r in rig.denied() if said in r] != []


@pytest.mark.parametrize("metadata", [{"status": "completed"}, {"finish_reason": "tool_calls"}, {}])
def test_the_calls_of_a_complete_answer_run(rig: Rig, metadata: dict[str, Any]) -> None:
    (answer,) = _run_scripted(rig, metadata)
    assert rig.ran == [5] and answer.status == "success"
