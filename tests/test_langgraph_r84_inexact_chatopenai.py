"""Review R84: a number no float holds as written (``500.00000000000000001`` against
``amount<=500``) is refused with the real ``ChatOpenAI`` wherever its answer, or its stream, keeps
the text of the call's arguments (docs/langgraph.md, Numbers no float holds). langchain-openai
(1.8) never fills ``additional_kwargs["tool_calls"]``, the only place the middleware read until
R84, so the call was allowed and ran as 500.0. Now it reads the fragments a streamed answer's
``tool_call_chunks`` carry (Chat Completions and the Responses API, ``invoke``, ``ainvoke`` and
LangGraph's v3 event stream, with ``gate_models`` on or off) and the Responses API's ``function_call`` content blocks; a
Chat Completions answer not streamed keeps the text nowhere, and is not checked (said so in the
docs). Loopback OpenAI endpoints, a real SQLite store."""

from __future__ import annotations

import asyncio
import json
import threading
import warnings
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from test_langgraph_hostile_model import NAMES, _policy

from agentgate.gate import AgentIdentity, Gate
from agentgate.integrations.langgraph import create_gated_agent
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

GO = {"messages": [{"role": "user", "content": "go"}]}
INEXACT = '{"amount": 500.00000000000000001, "note": "inv-1"}'
EXACT = '{"amount": 499.5, "note": "inv-1"}'


def _usage_responses() -> dict[str, Any]:
    return {
        "input_tokens": 10,
        "output_tokens": 16,
        "total_tokens": 26,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0},
    }


def _response(n: int, output: list[Any]) -> dict[str, Any]:
    return {
        "id": f"resp_{n}",
        "object": "response",
        "created_at": 0,
        "status": "completed",
        "model": "scripted",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": _usage_responses(),
    }


class _OpenAIServer:
    """A loopback OpenAI endpoint, Chat Completions and Responses, streamed or not: its first
    answer a ``refund`` call with ``arguments`` as written (streamed in two fragments), later
    answers the text ``done``."""

    def __init__(self, arguments: str) -> None:
        self.answered = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.answered += 1
                first = server.answered == 1
                if self.path.endswith("/responses"):
                    events = _responses_events(server.answered, arguments if first else None)
                else:
                    events = _chat_events(server.answered, arguments if first else None)
                if body.get("stream"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.end_headers()
                    for event in events[:-1]:
                        self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                    if self.path.endswith("/chat/completions"):
                        self.wfile.write(b"data: [DONE]\n\n")
                    return
                whole = json.dumps(events[-1]).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(whole)))
                self.end_headers()
                self.wfile.write(whole)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _chat_events(n: int, arguments: str | None) -> list[dict[str, Any]]:
    """A Chat Completions answer: its stream's chunks, then the answer whole (last)."""
    chunk = {"id": f"c{n}", "object": "chat.completion.chunk", "created": 0, "model": "scripted"}
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    if arguments is None:
        message: dict[str, Any] = {"role": "assistant", "content": "done"}
        deltas: list[dict[str, Any]] = [message]
        finish = "stop"
    else:
        call = {"id": "call_1", "type": "function", "function": {"name": "refund", "arguments": arguments}}
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        half = len(arguments) // 2
        first = {**call, "index": 0, "function": {"name": "refund", "arguments": arguments[:half]}}
        deltas = [
            {"role": "assistant", "content": None, "tool_calls": [first]},
            {"tool_calls": [{"index": 0, "function": {"arguments": arguments[half:]}}]},
        ]
        finish = "tool_calls"
    return [
        *({**chunk, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas),
        {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
        {**chunk, "choices": [], "usage": usage},
        {
            "id": f"c{n}",
            "object": "chat.completion",
            "created": 0,
            "model": "scripted",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage,
        },
    ]


def _responses_events(n: int, arguments: str | None) -> list[dict[str, Any]]:
    """A Responses API answer: its stream's events, then the answer whole (last)."""
    if arguments is None:
        text = {"type": "output_text", "text": "done", "annotations": []}
        item: dict[str, Any] = {"type": "message", "id": "m1", "role": "assistant", "status": "completed"}
        done = {**item, "content": [text]}
        events: list[dict[str, Any]] = [
            {"type": "response.output_item.added", "output_index": 0, "item": {**item, "content": []}},
            {
                "type": "response.output_text.delta",
                "item_id": "m1",
                "output_index": 0,
                "content_index": 0,
                "delta": "done",
            },
        ]
    else:
        item = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "refund"}
        done = {**item, "arguments": arguments, "status": "completed"}
        half = len(arguments) // 2
        events = [
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": {**item, "arguments": "", "status": "in_progress"},
            },
            *(
                {
                    "type": "response.function_call_arguments.delta",
                    "item_id": "fc_1",
                    "output_index": 0,
                    "delta": d,
                }
                for d in (arguments[:half], arguments[half:])
            ),
        ]
    whole = _response(n, [done])
    events = [
        {"type": "response.created", "response": {**_response(n, []), "status": "in_progress"}},
        *events,
        {"type": "response.completed", "response": whole},
    ]
    for number, event in enumerate(events):
        event["sequence_number"] = number
    return [*events, whole]


class _Rig:
    def __init__(self, tmp_path: Path) -> None:
        keys = {name: SigningKey.generate() for name in NAMES}
        text = _policy({n: k.did for n, k in keys.items()}, 1_000_000, "usd_micros")
        self.gate = Gate(parse_policy(text, source="p.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
        self.boss: AgentIdentity = self.gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
        self.ran: list[float] = []

        def refund(amount: float, note: str = "") -> str:
            self.ran.append(amount)
            return "refunded"

        self.tools: list[BaseTool] = [
            StructuredTool.from_function(func=refund, name="refund", description="refund")
        ]

    def run(
        self, arguments: str, *, way: str = "invoke", gate_models: bool = True, **model: Any
    ) -> list[ToolMessage]:
        server = _OpenAIServer(arguments)
        try:
            chat = ChatOpenAI(
                model="scripted", base_url=server.url, api_key="sk-loopback", max_retries=0, **model
            )
            agent = create_gated_agent(
                self.gate,
                name="boss",
                model=chat,
                tools=self.tools,
                gate_models=gate_models,
                checkpointer=InMemorySaver(),
            )
            config = {"configurable": {"thread_id": "t"}}
            if way == "ainvoke":
                result = asyncio.run(agent.ainvoke(GO, config, context=self.boss))
            elif way == "v3":  # LangChain's content-block events: no on_llm_new_token of their own
                with warnings.catch_warnings():  # v3 is marked experimental (warned once)
                    warnings.simplefilter("ignore")
                    for _ in agent.stream_events(GO, config, context=self.boss, version="v3"):
                        pass
                result = agent.get_state(config).values
            else:
                result = agent.invoke(GO, config, context=self.boss)
        finally:
            server.close()
        return [m for m in result["messages"] if isinstance(m, ToolMessage)]

    def denied(self) -> list[str]:
        self.gate.flush()
        return [e.reasons[0] for e in self.gate.audit.entries() if e.kind == "deny"]


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[_Rig]:
    made = _Rig(tmp_path)
    yield made
    made.gate.close()


CHECKED = [
    pytest.param({"streaming": True}, {}, id="chat-completions-streamed"),
    pytest.param({"streaming": True}, {"way": "ainvoke"}, id="chat-completions-streamed-ainvoke"),
    pytest.param({"streaming": True}, {"way": "v3"}, id="chat-completions-streamed-v3-events"),
    pytest.param({"streaming": True}, {"gate_models": False}, id="chat-completions-streamed-ungated-model"),
    pytest.param({"streaming": True, "use_responses_api": True}, {}, id="responses-streamed"),
    pytest.param({"use_responses_api": True}, {}, id="responses-not-streamed"),
    pytest.param(
        {"streaming": True, "use_responses_api": True, "output_version": "v0"}, {}, id="responses-v0-streamed"
    ),
]


@pytest.mark.parametrize(("model", "run"), CHECKED)
def test_a_number_no_float_holds_is_refused_with_the_real_chat_openai(
    rig: _Rig, model: dict[str, Any], run: dict[str, Any]
) -> None:
    (answer,) = rig.run(INEXACT, **run, **model)
    assert rig.ran == []  # until R84: [500.0], decided against amount<=500 as 500.0
    assert answer.status == "error"
    assert "argument 'amount' is 500.00000000000000001, a number no float holds as written" in str(
        answer.content
    )
    assert any("argument 'amount'" in r and "no float holds as written" in r for r in rig.denied())


@pytest.mark.parametrize(("model", "run"), CHECKED)
def test_a_number_a_float_holds_runs_with_the_real_chat_openai(
    rig: _Rig, model: dict[str, Any], run: dict[str, Any]
) -> None:
    (answer,) = rig.run(EXACT, **run, **model)
    assert rig.ran == [499.5] and answer.status == "success"


def test_chat_completions_not_streamed_keeps_no_text_and_is_not_checked(rig: _Rig) -> None:
    # What docs/langgraph.md says of this path: langchain-openai parses the arguments and keeps
    # no text of them anywhere in the answer, so the call is decided on the float it read.
    (answer,) = rig.run(INEXACT)
    assert rig.ran == [500.0] and answer.status == "success"
