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
"""Set with ``STOP_KEY`` when the refusal is for a budget (``_budget_refused``), in the artifact of the refused
tool call and in the metadata of the answer that ends the run (``_stop_mark``): a delegation tool
reads it on its sub-agent's last answer (``_paid_for_nothing``)."""
_DEAD_IDENTITY = frozenset({"revoked", "grant_expired", "no_chain", "inherited_identity", "untrusted_root"})
"""Finding codes of a refusal that every later call on the same identity gets too: a revoked or
expired grant, a run without an identity, a nested agent on its parent's identity, a chain whose
root the policy no longer trusts (its trust anchor rotated out, e.g. while the run was paused)."""


def _budget_refused(auth: Authorization) -> bool:
    """Whether ``auth`` is refused for a budget in a way no later call of the run overcomes: an
    exhausted budget, or a model call that costs more than a budget's whole limit
    (``budget_never_fits``: the run's next model call asks as much; a tool call that never fits
    does not end the run, the model may do without it, as with a quota's whole limit). Its mark
    ends a supervisor's run too when its sub-agent paid for nothing (``_paid_for_nothing``): every
    later delegation would hand on a grant just like it (until review R82 split the two, after
    which such a sub-agent was delegated to again and again)."""
    return auth.budget_exhausted or (auth.budget_never_fits and auth.call.resource.startswith("model:"))


def _ends_run(auth: Authorization, gate: Gate) -> bool:
    """Whether the refusal ``auth`` ends the run: a budget refusal (``_budget_refused``), or an
    identity on which every later call is refused too (``_DEAD_IDENTITY``, ``_disowned``)."""
    return (
        _budget_refused(auth)
        or any(f.code in _DEAD_IDENTITY for f in auth.findings)
        or (not auth.allowed and _disowned(gate, auth.identity))
    )


def _disowned(gate: Gate, identity: AgentIdentity | None) -> bool:
    """Whether ``gate``'s policy no longer accepts ``identity`` (``Gate.disowns``): every call of
    it is refused (``... is not a principal of this policy``)."""
    return identity is not None and gate.disowns(identity)


def _stop_mark(auth: Authorization, gate: Gate) -> dict[str, bool] | None:
    """What a refusal that ends the run (``_ends_run``) carries, in its tool message's artifact
    and its answer's metadata: ``STOP_KEY``, and ``_BUDGET_KEY`` for a budget refusal."""
    return {STOP_KEY: True, _BUDGET_KEY: _budget_refused(auth)} if _ends_run(auth, gate) else None


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
