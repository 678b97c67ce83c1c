"""LangGraph / LangChain integration: every tool call and model call of an agent goes through a ``Gate``.

The only package of agentgate that imports langgraph or langchain (the optional ``langgraph`` extra).

- ``GateMiddleware`` for ``langchain.agents.create_agent``: ``wrap_tool_call`` / ``awrap_tool_call``
  (decision, approval through ``interrupt()``, scheduler, audit) and ``wrap_model_call`` /
  ``awrap_model_call`` (model capability, approval through ``interrupt()`` where the policy's
  gate covers the model call, token budget reserved, backend chosen by the gate
  where a dispatcher is configured, actual usage from ``usage_metadata`` committed).
- ``gated_tool_node`` for hand-built ``StateGraph``s: a ``ToolNode`` whose sync and async paths
  both go through the gate, so the scheduler's limits hold under ``ainvoke`` too (LangGraph's
  own async ToolNode path gathers every call at once and ignores ``max_concurrency``).
- ``delegation_tool``: a sub-agent exposed as a tool; each call hands the sub-agent a fresh grant,
  attenuated to what the supervisor declares, bound to the sub-agent's own key, shorter-lived.
- ``ScriptedChatModel``: a deterministic chat model for offline examples, tests and benchmarks.

Identity travels in the run's context (``context=AgentIdentity(...)``, ``context_schema``), never in
state or messages, so the model never sees a key or a token. LangGraph hands a nested agent its
parent's context when it is invoked without one; the middleware of the nested agent sees an
identity that is not its own and refuses every call with an ``implicit_trust_inheritance`` finding.

Where each part lives (private modules: import the names above from this package):
``_middleware`` (``GateMiddleware`` and the refusals and failures it tells the model),
``_agents`` (``create_gated_agent``, ``gated_tool_node``), ``_delegation`` (``delegation_tool``,
its helpers and the registry of the tools it made), ``_models`` (``DispatchedChatModel``,
``ScriptedChatModel``), ``_calls`` (a sync tool's call under ``ainvoke``, a model call's stream
watched, the tokens an answer reports), and what they share: ``_scope`` (the identity of a run,
the scope a call runs once in, an answer cut at its output limit) and ``_stops`` (the mark of a
refusal that ends the run).
"""

from __future__ import annotations

from agentgate.integrations.langgraph._agents import create_gated_agent, gated_tool_node
from agentgate.integrations.langgraph._delegation import delegation_tool
from agentgate.integrations.langgraph._middleware import KEPT_RESULTS as KEPT_RESULTS
from agentgate.integrations.langgraph._middleware import GateMiddleware
from agentgate.integrations.langgraph._models import DispatchedChatModel, ScriptedChatModel
from agentgate.integrations.langgraph._scope import identity_from_context
from agentgate.integrations.langgraph._stops import STOP_KEY as STOP_KEY

__all__ = [
    "DispatchedChatModel",
    "GateMiddleware",
    "ScriptedChatModel",
    "create_gated_agent",
    "delegation_tool",
    "gated_tool_node",
    "identity_from_context",
]
