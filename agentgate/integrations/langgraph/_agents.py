"""The agents and nodes the integration builds around ``GateMiddleware``: ``create_gated_agent``
(``create_agent`` with the gate's middleware innermost) and ``gated_tool_node`` (a ``ToolNode`` for
hand-built graphs).

Imported first by the package: the import of ``langchain.agents`` here is the one that says which
extra is missing when it is not installed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

try:  # the optional extra: say which, not only "No module named 'langchain'"
    from langchain.agents import create_agent
except ImportError as exc:  # pragma: no cover - exercised by tests/test_packaging_extras.py
    raise ImportError(
        f"agentgate.integrations.langgraph needs the langgraph extra ({exc}): "
        "pip install 'agentgate-middleware[langgraph]'",
        name=exc.name,
    ) from exc
from langchain.agents.middleware import AgentMiddleware
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.tools import BaseTool
from langgraph.prebuilt import ToolNode

from agentgate.gate import AgentIdentity, Gate
from agentgate.integrations.langgraph._middleware import GateMiddleware


def create_gated_agent(
    gate: Gate,
    *,
    name: str,
    model: BaseChatModel,
    tools: Sequence[BaseTool | Callable[..., Any]] = (),
    system_prompt: str | None = None,
    agent_did: str | None = None,
    enforce: bool = False,
    model_name: str | None = None,
    gate_models: bool = True,
    max_tokens: int = 1024,
    middleware: Sequence[AgentMiddleware[Any, Any, Any]] = (),
    checkpointer: Any = None,
    response_format: Any = None,
) -> Any:
    """``create_agent`` with the gate's middleware installed last (innermost, after ``middleware``)
    and ``AgentIdentity`` as the context schema. Run it with ``context=identity``.

    Every call the other middleware makes goes through the gate: a retried tool is decided again
    (and a tool error, which the gate turns into a message, is not retried by them), a fallback
    model is decided under its own name (``model_name`` names ``model`` only), edited arguments
    are decided as edited. ``response_format`` (``ToolStrategy``, ``ProviderStrategy``, a schema)
    is ``create_agent``'s: the structured answer is no tool call, so it needs no grant; the model
    call that gives it is decided and charged as any other (docs/langgraph.md).
    """
    return create_agent(
        model,
        list(tools),
        system_prompt=system_prompt,
        middleware=[
            *middleware,
            GateMiddleware(
                gate,
                agent=name,
                agent_did=agent_did,
                enforce=enforce,
                model=model_name,
                gate_models=gate_models,
                max_tokens=max_tokens,
                named=model,
            ),
        ],
        context_schema=AgentIdentity,
        checkpointer=checkpointer,
        name=name,
        response_format=response_format,
    )


def gated_tool_node(
    gate: Gate,
    tools: Sequence[BaseTool | Callable[..., Any]],
    *,
    agent: str,
    agent_did: str | None = None,
    enforce: bool = False,
    name: str = "tools",
) -> ToolNode:
    """A ``ToolNode`` for hand-built graphs whose every call, sync or async, goes through ``gate``.

    A tool that calls ``interrupt()`` itself must not share a task with a call that may wait for
    an approval: LangGraph matches a task's resume values to its interrupts by position, and the
    node's calls run at once, so the answers would cross. Route such calls one per task (``Send``
    to this node with a one-call message list), as ``create_agent`` does (docs/langgraph.md)."""
    middleware = GateMiddleware(gate, agent=agent, agent_did=agent_did, enforce=enforce)
    return ToolNode(
        list(tools),
        name=name,
        wrap_tool_call=middleware.wrap_tool_call,
        awrap_tool_call=middleware.awrap_tool_call,
    )
