"""The mark of a refusal that ends the run: ``STOP_KEY`` (and ``_BUDGET_KEY`` for an exhausted
budget) in the artifact of a refused tool call or the metadata of the answer that ends the run;
which refusals carry it (``_ends_run``: an exhausted budget, or an identity on which every later
call is refused too), and where the middleware looks for it (``_run_stop``, ``_run_messages``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain.agents.middleware import ModelRequest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from agentgate.gate import AgentIdentity, Authorization, Gate

STOP_KEY = "agentgate_stop"
"""Set in the artifact of a refusal that no later call of this run can overcome (see ``_ends_run``)."""
_BUDGET_KEY = "agentgate_budget_exhausted"
"""Set with ``STOP_KEY`` when the refusal is for an exhausted budget, in the artifact of the refused
tool call and in the metadata of the answer that ends the run (``_stop_mark``): a delegation tool
reads it on its sub-agent's last answer (``_paid_for_nothing``)."""
_DEAD_IDENTITY = frozenset({"revoked", "grant_expired", "no_chain", "inherited_identity", "untrusted_root"})
"""Finding codes of a refusal that every later call on the same identity gets too: a revoked or
expired grant, a run without an identity, a nested agent on its parent's identity, a chain whose
root the policy no longer trusts (its trust anchor rotated out, e.g. while the run was paused)."""


def _ends_run(auth: Authorization, gate: Gate) -> bool:
    """Whether the refusal ``auth`` ends the run: an exhausted budget, or an identity on which
    every later call is refused too (``_DEAD_IDENTITY``, ``_disowned``)."""
    return (
        auth.budget_exhausted
        or any(f.code in _DEAD_IDENTITY for f in auth.findings)
        or (not auth.allowed and _disowned(gate, auth.identity))
    )


def _disowned(gate: Gate, identity: AgentIdentity | None) -> bool:
    """Whether ``gate``'s policy no longer accepts ``identity`` (``Gate.disowns``): every call of
    it is refused (``... is not a principal of this policy``)."""
    return identity is not None and gate.disowns(identity)


def _stop_mark(auth: Authorization, gate: Gate) -> dict[str, bool] | None:
    """What a refusal that ends the run (``_ends_run``) carries, in its tool message's artifact
    and its answer's metadata: ``STOP_KEY``, and ``_BUDGET_KEY`` for an exhausted budget."""
    return {STOP_KEY: True, _BUDGET_KEY: auth.budget_exhausted} if _ends_run(auth, gate) else None


def _run_stop(messages: Sequence[BaseMessage]) -> ToolMessage | None:
    """The refusal to end the run on, when a tool call since the model's last turn was refused
    for good (``_ends_run``): asking the model again would only spend more, on calls that can
    only be refused (also when model calls are not gated)."""
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            return None
        if (
            isinstance(message, ToolMessage)
            and isinstance(message.artifact, dict)
            and message.artifact.get(STOP_KEY)
        ):
            return message
    return None


def _run_messages(request: ModelRequest[Any]) -> Sequence[BaseMessage]:
    """The run's own messages (its state), where a refusal's stop mark is kept: a middleware
    outside the gate may edit the request's copy (``ContextEditingMiddleware`` clears old tool
    results, their artifacts included); the request's messages when the state has none."""
    state = request.state
    messages = state.get("messages") if isinstance(state, Mapping) else None
    return messages if isinstance(messages, list) else request.messages
