"""A Gate over SQLite with ``boss`` issued, and loopback OpenAI endpoints (Chat Completions and the
Responses API) for the real ``ChatOpenAI``: the set-up the R84 LangGraph tests share
(test_langgraph_r84_inexact_chatopenai.py, test_langgraph_r84_responses_cut.py,
test_langgraph_r84_nested_key.py and the test_langgraph_r84b_*.py files)."""

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
from langchain_core.messages import BaseMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from test_langgraph_hostile_model import NAMES, _policy

from agentgate.audit.entry import AuditEntry
from agentgate.gate import AgentIdentity, Gate
from agentgate.integrations.langgraph import create_gated_agent
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

GO = {"messages": [{"role": "user", "content": "go"}]}
INEXACT = '{"amount": 500.00000000000000001, "note": "inv-1"}'


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing."""

    def log_message(self, *args: Any) -> None:
        pass


class Loopback:
    """``handler`` served on 127.0.0.1 from a daemon thread; ``url`` its ``/v1``."""

    def __init__(self, handler: type[BaseHTTPRequestHandler]) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self.httpd.serve_forever, args=(0.02,), daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def chat_openai(url: str, **model: Any) -> ChatOpenAI:
    """The real ``ChatOpenAI`` of model ``scripted`` at ``url``, no retries."""
    return ChatOpenAI(model="scripted", base_url=url, api_key="sk-loopback", max_retries=0, **model)


def response(
    n: int, output: list[Any], status: str = "completed", reason: str | None = None
) -> dict[str, Any]:
    """A Responses API response (``incomplete_details.reason`` where ``reason`` is given)."""
    made: dict[str, Any] = {
        "id": f"resp_{n}",
        "object": "response",
        "created_at": 0,
        "status": status,
        "model": "scripted",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 10,
            "output_tokens": 16,
            "total_tokens": 26,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }
    if reason is not None:
        made["incomplete_details"] = {"reason": reason}
    return made


class OpenAIServer(Loopback):
    """A loopback OpenAI endpoint, Chat Completions and Responses, streamed or not: its first
    answer a ``refund`` call with ``arguments`` as written (streamed in two fragments), later
    answers the text ``done``."""

    def __init__(self, arguments: str) -> None:
        self.answered = 0
        server = self

        class Handler(QuietHandler):
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

        super().__init__(Handler)


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
    whole = response(n, [done])
    events = [
        {"type": "response.created", "response": {**response(n, []), "status": "in_progress"}},
        *events,
        {"type": "response.completed", "response": whole},
    ]
    for number, event in enumerate(events):
        event["sequence_number"] = number
    return [*events, whole]


class GatedRig:
    """A Gate over SQLite (``tmp_path/agentgate.db``) on test_langgraph_hostile_model's policy,
    ``boss`` issued; ``ran`` for the tools to record what they ran."""

    def __init__(self, tmp_path: Path) -> None:
        keys = {name: SigningKey.generate() for name in NAMES}
        text = _policy({n: k.did for n, k in keys.items()}, 1_000_000, "usd_micros")
        self.gate = Gate(parse_policy(text, source="p.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
        self.boss: AgentIdentity = self.gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
        self.ran: list[Any] = []
        self.tools: list[BaseTool] = []

    def denials(self) -> list[AuditEntry]:
        self.gate.flush()
        return [e for e in self.gate.audit.entries() if e.kind == "deny"]

    def denied(self) -> list[str]:
        return [e.reasons[0] for e in self.denials()]


class Rig(GatedRig):
    """``GatedRig`` with a ``refund`` tool that records the amounts it ran; ``run`` asks the real
    ``ChatOpenAI`` against an ``OpenAIServer``."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)

        def refund(amount: float, note: str = "") -> str:
            self.ran.append(amount)
            return "refunded"

        self.tools = [StructuredTool.from_function(func=refund, name="refund", description="refund")]

    def run(
        self, arguments: str, *, way: str = "invoke", gate_models: bool = True, **model: Any
    ) -> list[ToolMessage]:
        server = OpenAIServer(arguments)
        try:
            messages = self.converse(server.url, way=way, gate_models=gate_models, **model)
        finally:
            server.close()
        return [m for m in messages if isinstance(m, ToolMessage)]

    def converse(
        self, url: str, *, way: str = "invoke", gate_models: bool = True, **model: Any
    ) -> list[BaseMessage]:
        """The messages of a gated agent over ``chat_openai(url, **model)`` asked ``GO``, by
        ``invoke``, ``ainvoke``, ``stream`` (``messages``) or LangGraph's v3 events (``v3``)."""
        agent = create_gated_agent(
            self.gate,
            name="boss",
            model=chat_openai(url, **model),
            tools=self.tools,
            gate_models=gate_models,
            checkpointer=InMemorySaver(),
        )
        config = {"configurable": {"thread_id": "t"}}
        if way == "ainvoke":
            return list(asyncio.run(agent.ainvoke(GO, config, context=self.boss))["messages"])
        if way == "messages":
            for _ in agent.stream(GO, config, context=self.boss, stream_mode="messages"):
                pass
        elif way == "v3":  # LangChain's content-block events: no on_llm_new_token of their own
            with warnings.catch_warnings():  # v3 is marked experimental (warned once)
                warnings.simplefilter("ignore")
                for _ in agent.stream_events(GO, config, context=self.boss, version="v3"):
                    pass
        else:
            return list(agent.invoke(GO, config, context=self.boss)["messages"])
        return list(agent.get_state(config).values["messages"])


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    made = Rig(tmp_path)
    yield made
    made.gate.close()
