"""Review R61: a value a middleware writes for a tool's plain ``InjectedToolArg`` never reaches
the tool: LangGraph's ``ToolNode`` strips it, with or without agentgate (docs/langgraph.md,
"Injected arguments are not the model's")."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage
from langchain_core.tools import InjectedToolArg, StructuredTool
from langgraph.prebuilt.tool_node import ToolCallRequest

from agentgate.gate import Gate
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker]}}
tools:
  pay:
    args: {{amount: {{type: integer, required: true}}}}
roles:
  worker:
    kind: agent
    capabilities: [{{resource: tool:pay}}]
    ttl_s: 3600
"""

GO = {"messages": [{"role": "user", "content": "go"}]}


class _Filling(AgentMiddleware[Any, Any, Any]):
    """A middleware that fills the tool's ``api_key`` in the tool call it hands on."""

    def wrap_tool_call(self, request: ToolCallRequest, handler: Callable[[ToolCallRequest], Any]) -> Any:
        call = {**request.tool_call, "args": {**request.tool_call["args"], "api_key": "sk-from-middleware"}}
        return handler(request.override(tool_call=call))  # type: ignore[arg-type]


def _pay_tool(seen: list[str]) -> StructuredTool:
    def pay(amount: int, api_key: Annotated[str, InjectedToolArg] = "unset") -> str:
        seen.append(api_key)
        return f"paid {amount}"

    return StructuredTool.from_function(func=pay, name="pay", description="pay")


def _answer() -> AIMessage:
    # The model writes a value for the hidden argument too: dropped as the middleware's is.
    return AIMessage(
        content="", tool_calls=[{"name": "pay", "args": {"amount": 1, "api_key": "sk-model"}, "id": "p-1"}]
    )


@pytest.mark.parametrize("gated", [False, True], ids=["langchain-alone", "behind-the-gate"])
def test_a_middleware_cannot_fill_a_plain_injected_tool_arg(tmp_path: Path, gated: bool) -> None:
    """Review R61: the tool gets its default for a plain ``InjectedToolArg``, not the value a
    middleware outside the gate wrote (nor the model's), with LangChain alone as behind the gate:
    LangGraph's behaviour, not agentgate's."""
    seen: list[str] = []
    model = ScriptedChatModel(turns=[_answer()])
    if not gated:
        create_agent(model, tools=[_pay_tool(seen)], middleware=[_Filling()]).invoke(GO)
    else:
        keys = {name: SigningKey.generate() for name in ("root", "agent")}
        text = POLICY.format(root=keys["root"].did, agent=keys["agent"].did)
        gate = Gate(parse_policy(text, source="pay.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
        try:
            agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
            graph = create_gated_agent(
                gate,
                name="agent",
                model=model,
                tools=[_pay_tool(seen)],
                middleware=[_Filling()],
                gate_models=False,
            )
            graph.invoke(GO, context=agent)
        finally:
            gate.close()
    assert seen == ["unset"]
