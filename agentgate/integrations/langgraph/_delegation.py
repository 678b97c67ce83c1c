"""``delegation_tool``: a sub-agent exposed to a supervisor as a tool, each call delegating it a
fresh, attenuated grant; the registry of the tools it made (``_DELEGATION_TOOLS``,
``_is_delegation``: a delegation is known by the tool object and the Gate that made it), and its
helpers: where the tool call runs (``_tool_call_place``), a sub-agent steering its parent refused
(``_no_parent_command``), an agentgate error out of a sub-agent's run known as the tool's own
(``_sub_agents_own``), and the sub-agent's answer with the mark that ends the supervisor's run
(``_reply``, ``_paid_for_nothing``)."""

from __future__ import annotations

import contextlib
import re
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Annotated, Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.tools import BaseTool, InjectedToolCallId, StructuredTool
from langgraph.config import get_config
from langgraph.errors import ParentCommand
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.runtime import get_runtime

from agentgate.audit.spans import execute_tool_span, invoke_agent_span
from agentgate.capabilities import Call, Capability
from agentgate.errors import AgentGateError, AuthorityError, Denied, InputError
from agentgate.findings import Finding, FindingKind
from agentgate.gate import AgentIdentity, Gate
from agentgate.gate._authorization import expect
from agentgate.gate._delegation import _delegation_terms
from agentgate.integrations.langgraph._replies import _hiding
from agentgate.integrations.langgraph._scope import _task_scope, identity_from_context
from agentgate.integrations.langgraph._stops import _BUDGET_KEY, STOP_KEY
from agentgate.keys import SigningKey
from agentgate.policy import Policy

TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
"""What a tool's name must be for the model API a supervisor's tools are bound to: OpenAI's chat
completions API refuses a request holding a tool whose name does not match
``^[a-zA-Z0-9_-]{1,64}$`` (``'Google Search' does not match ... - 'functions.0.name'``), and so do
OpenAI-compatible servers that check as it does."""

MAX_DELEGATION_NAME_CHARS = 64 - len("ask_")
"""The most characters of a sub-agent's name ``delegation_tool`` takes: its tool is ``ask_NAME``."""


def _check_tool_name(name: str) -> None:
    """``InputError`` unless ``ask_{name}`` is a tool name model APIs take (``TOOL_NAME``): a
    sub-agent's name is 1 to ``MAX_DELEGATION_NAME_CHARS`` ASCII letters, digits, ``_`` or ``-``.
    Until review R56 a name such as ``research team`` made a tool that the supervisor's model API
    refused at its first turn, ending the run; refused here, the error shows when the tool is
    made. The name is not rewritten into a valid one: it is also the name the grant, the audit
    log and the spans record, and two names rewritten alike would be one tool."""
    if TOOL_NAME.fullmatch(f"ask_{name}") is None:
        raise InputError(
            f"a sub-agent's name must be 1 to {MAX_DELEGATION_NAME_CHARS} ASCII letters, digits, "
            f"'_' or '-', since its tool ask_NAME is named for model APIs that take only "
            f"{TOOL_NAME.pattern}: got {name[:80]!r}"
            + (f" ({len(name):,} characters)" if len(name) > MAX_DELEGATION_NAME_CHARS else "")
        )


_DELEGATION_TOOLS: dict[int, tuple[weakref.ref[BaseTool], weakref.ref[Gate]]] = {}
"""The tools ``delegation_tool`` made, by ``id``, each with the Gate that made it, both held
weakly (an entry goes with its tool): a delegation is known by the tool object itself, not by its
metadata, which whoever writes or converts a tool can set."""


def _register_delegation(tool: BaseTool, gate: Gate) -> None:
    key = id(tool)

    def forget(ref: weakref.ref[BaseTool]) -> None:
        entry = _DELEGATION_TOOLS.get(key)
        if entry is not None and entry[0] is ref:
            del _DELEGATION_TOOLS[key]

    _DELEGATION_TOOLS[key] = (weakref.ref(tool, forget), weakref.ref(gate))


_SUB_AGENT_RAISED: weakref.WeakSet[BaseException] = weakref.WeakSet()
"""The agentgate errors that came out of a delegated sub-agent's run (``_sub_agents_own``), held
weakly: each goes with the error."""


@contextlib.contextmanager
def _sub_agents_own() -> Iterator[None]:
    """Mark an agentgate error raised out of the sub-agent's run inside (its chat model's
    ``BackendFailed``, with the backend's words; its own ``Denied`` under ``enforce``) as the
    delegation tool's own (``_raised_by_sub_agent``), as against the gate's refusal of the
    delegation itself, raised before the sub-agent runs."""
    try:
        yield
    except AgentGateError as exc:
        _SUB_AGENT_RAISED.add(exc)
        raise


def _raised_by_sub_agent(exc: BaseException) -> bool:
    """Whether ``exc`` came out of a delegated sub-agent's run (``_sub_agents_own``): the
    supervisor's model is told it by its type only (``_failure``'s ``tools_own``), as a tool's own
    error; until review R91 it was told its text, secrets and all."""
    return exc in _SUB_AGENT_RAISED


def _is_delegation(request: ToolCallRequest, gate: Gate) -> bool:
    """Whether the requested tool is a delegation tool that ``gate`` made (``delegation_tool``).

    A delegation is authorized by the policy's delegation rule and the parent's grant
    (Gate.delegate), and audited there; the sub-agent's own calls go through its own middleware.
    One made by another Gate is an ordinary tool to this one, decided (and audited) by its
    policy: handed to an agent gated by another Gate, it would otherwise delegate under the
    maker's rules while the agent's own Gate was never asked and recorded nothing."""
    tool = request.tool
    entry = _DELEGATION_TOOLS.get(id(tool)) if tool is not None else None
    return entry is not None and entry[0]() is tool and entry[1]() is gate


def delegation_tool(
    gate: Gate,
    *,
    name: str,
    agent: Any,
    key: SigningKey,
    capabilities: Iterable[Capability | str],
    ttl: timedelta,
    budget: int | None = None,
    description: str | None = None,
) -> BaseTool:
    """Expose ``agent`` (a compiled graph gated under ``name``) to a supervisor as the tool ``ask_NAME``.

    The tool call itself is authorized as a delegation (``Gate.delegate``: the policy's delegation
    rule for the supervisor's roles, then attenuation of its grant), not as a tool rule. Each call delegates from the supervisor's grant a fresh one to ``key`` (the sub-agent's own
    key), attenuated to ``capabilities`` and ``budget``, living ``ttl`` at most and never past the
    parent's expiry, and runs the sub-agent with it. A delegation the parent cannot make (scope
    creep, an expired or revoked parent) is refused as a tool error; the sub-agent does not run.
    A sub-agent refused for budget before its grant paid for anything ends the supervisor's run
    too (``_paid_for_nothing``).

    The terms are checked when the tool is made, not at its first call: ``InputError`` for a
    ``gate`` that is not a ``Gate``, a ``name`` that ``Gate.delegate`` would refuse (not 1 to
    ``MAX_AGENT_NAME_CHARS`` characters of visible text on one line) or that makes no tool name
    model APIs take (not 1 to ``MAX_DELEGATION_NAME_CHARS`` ASCII letters, digits, ``_`` or
    ``-``: ``_check_tool_name``), a ``key`` that is not
    a ``SigningKey``, a ``ttl`` that is not a positive ``timedelta``, a ``budget`` that is not a
    non-negative whole number or ``None``; ``CapabilityError`` for ``capabilities`` that are not
    a list (one string included) or hold one that does not parse.
    """
    expect(gate, Gate, "gate", "a Gate")
    expect(description, (str, type(None)), "description", "text or None")
    caps = tuple(_delegation_terms(name, key, capabilities, ttl, budget))
    _check_tool_name(name)

    # One grant per delegating tool call, in its task (thread and graph step): when LangGraph
    # re-runs the tool to resume an interrupt (a sub-agent waiting for an approval), the
    # sub-agent resumes on the grant it had, so an approval bound to that grant still matches,
    # also when another process (a restart, another worker on the shared store) resumes it: the
    # Gate finds the grant in the store by the call it was delegated for (``Gate.delegate``'s
    # ``call``). The same tool call id in another turn or run (a model that numbers its calls
    # from 0) is another call and gets a fresh grant.
    def _delegate(where: _ToolCallPlace) -> AgentIdentity:
        context, config, tool_call_id = where
        scope = _task_scope(config)
        call = f"{scope}|{tool_call_id}" if tool_call_id and scope is not None else None
        parent = identity_from_context(context)
        try:
            return gate.delegate(
                parent, name=name, key=key, capabilities=caps, ttl=ttl, budget=budget, call=call
            )
        except AuthorityError as exc:
            # The supervisor's model is told this text (``_failure``): it may quote a declared or
            # held capability, or one the policy lets a delegator hand on, whose constraint pins a
            # secret (``tool:db?api_key=sk-...``), which the model has no use for (it cannot change
            # the declaration, nor the policy). Each operand is hidden, its argument named; the
            # finding and the audit entry keep the text whole. Until review R61 the model was told
            # the operands, and until review R82 those of the policy's delegation rules.
            hidden = _constrained(caps, parent, gate.policy)
            exc.args = (_hiding(str(exc), hidden, DECLARED_OPERAND),)
            raise

    # Spans: the delegation is an ``execute_tool ask_NAME`` span holding the ``delegate agent:NAME``
    # span of ``Gate.delegate`` and then an ``invoke_agent NAME`` span, under which the sub-agent's
    # own calls nest (a trace shows who asked whom). The decision, and its audit entry's index, is
    # on the ``delegate`` span only: one span per audited decision, so that refusals counted by
    # span count a refused delegation once (until review R54 the tool's span carried it too).
    # The run context and config are read where LangGraph keeps them for the running task
    # (``_tool_call_place``), not injected as a ``ToolRuntime`` argument: LangChain validates and
    # then serializes an injected runtime, the graph state and every message in it included, on
    # each call (about 3 ms a delegation with benchmarks/langgraph_overhead.py's agents, measured
    # by the scratch runs of docs/langgraph.md's twelfth pass; more as the conversation grows).
    # Only the tool call id is injected.
    def run(
        task: str, tool_call_id: Annotated[str, InjectedToolCallId]
    ) -> tuple[str, dict[str, bool] | None]:
        with execute_tool_span(f"ask_{name}", call_id=tool_call_id, tracer=gate.tracer):
            child = _delegate(_tool_call_place(tool_call_id))
            with (
                invoke_agent_span(name, agent_id=child.did, tracer=gate.tracer),
                _no_parent_command(gate, child, name),
                _sub_agents_own(),  # innermost: what the sub-agent raised, not the refusal above
            ):
                last = _last_answer(agent.invoke({"messages": [HumanMessage(content=task)]}, context=child))
            return _reply(last, _ran_out(last) and _paid_for_nothing(gate, child))

    async def arun(
        task: str, tool_call_id: Annotated[str, InjectedToolCallId]
    ) -> tuple[str, dict[str, bool] | None]:
        with execute_tool_span(f"ask_{name}", call_id=tool_call_id, tracer=gate.tracer):
            child = await gate.to_thread(_delegate, _tool_call_place(tool_call_id))
            with (
                invoke_agent_span(name, agent_id=child.did, tracer=gate.tracer),
                _no_parent_command(gate, child, name),
                _sub_agents_own(),  # innermost: what the sub-agent raised, not the refusal above
            ):
                result = await agent.ainvoke({"messages": [HumanMessage(content=task)]}, context=child)
            last = _last_answer(result)
            return _reply(last, _ran_out(last) and await gate.to_thread(_paid_for_nothing, gate, child))

    tool = StructuredTool.from_function(
        func=run,
        coroutine=arun,
        name=f"ask_{name}",
        description=description or f"Hand a task to the {name} agent and get its answer.",
        # The artifact carries the mark that ends the supervisor's run (``_run_stop``), if any.
        response_format="content_and_artifact",
    )
    _register_delegation(tool, gate)
    return tool


DECLARED_OPERAND = "<not shown to the model>"
"""What a supervisor's model is shown for each constraint's operand in a refused delegation's text
(``delegation_tool``)."""


def _constrained(caps: Iterable[Capability], parent: AgentIdentity | None, policy: Policy) -> frozenset[str]:
    """The argument names that a delegation's declared capabilities, any capability of its
    parent's chain, or any of ``policy``'s delegation rules constrain: those whose operands a
    refusal's text may quote (``delegation_wider_than_policy`` lists what the policy lets the
    parent, or a delegator above it, hand on)."""
    held = [cap for link in parent.chain.links for cap in link.capabilities] if parent is not None else []
    delegable = [rule.capability for rules in policy.delegable.values() for rule in rules]
    return frozenset(name for cap in [*caps, *held, *delegable] for name, _ in cap.constraints)


_STEERS_PARENT = Finding(
    kind=FindingKind.IMPLICIT_TRUST_INHERITANCE,
    code="sub_agent_steers_parent",
    message=(
        "a sub-agent's tool returned Command(graph=Command.PARENT): it would write into the "
        "supervisor's state and run calls on the supervisor's grant; refused"
    ),
    hint="a sub-agent answers its task; only the supervisor's own model asks for its calls",
)


@contextlib.contextmanager
def _no_parent_command(gate: Gate, child: AgentIdentity, name: str) -> Iterator[None]:
    """Refuse a ``Command(graph=Command.PARENT)`` raised out of a delegated sub-agent's run
    (review R42): LangGraph applies it to the supervisor's graph, so the sub-agent could add an
    ``AIMessage`` with tool calls of its own choosing and have them run on the supervisor's grant,
    recorded as the supervisor's calls, with the authority it was never delegated. The attempt is
    recorded as a ``deny`` by the sub-agent (``implicit_trust_inheritance``) and the delegation
    fails with ``Denied`` (the supervisor's model is told; the supervisor's state is untouched).
    An ``interrupt()`` (an approval the sub-agent waits for) still pauses the run."""
    try:
        yield
    except ParentCommand:
        call = Call.tool(f"ask_{name}", {})
        refused = gate.record_refusal(child, call, (_STEERS_PARENT.message,), findings=(_STEERS_PARENT,))
        raise Denied(
            f"agentgate refused the delegation: {_STEERS_PARENT.message}", refused.decision
        ) from None


def _last_answer(result: Mapping[str, Any]) -> BaseMessage | None:
    """The last message of a sub-agent's run: its answer."""
    messages: Sequence[BaseMessage] = result.get("messages") or ()
    return messages[-1] if messages else None


def _ran_out(last: BaseMessage | None) -> bool:
    """Whether a sub-agent's run ended, with the answer ``last``, on an exhausted budget."""
    return isinstance(last, AIMessage) and bool(last.response_metadata.get(_BUDGET_KEY))


def _paid_for_nothing(gate: Gate, child: AgentIdentity) -> bool:
    """Whether the delegated grant ``child`` paid for no call (a ledger read). A sub-agent that ran
    out of budget before paying for anything ends the supervisor's run too (``_reply``): every
    later delegation of the same tool hands on a fresh grant just like it (the budget that could
    not pay is one above it, or one model call costs more than the grant carries: the stop mark
    of ``_budget_refused``), and would only be refused again. One that spent part of its grant
    first is answered as usual: a budget of its
    own may be what ran out, and the next delegation, given a fresh one, is refused its first call
    if the supervisor's ran out."""
    spent = gate.budget_usage(child).get(child.grant_id)
    return spent is not None and spent[0] == 0


def _reply(last: BaseMessage | None, ends_run: bool) -> tuple[str, dict[str, bool] | None]:
    """The delegation tool's result: the sub-agent's answer, and as its artifact the mark that
    ends the supervisor's run at its model's next turn (``_run_stop``) when ``ends_run``."""
    answer = "" if last is None else str(last.content)
    return answer, {STOP_KEY: True, _BUDGET_KEY: True} if ends_run else None


_ToolCallPlace = tuple[object, Mapping[str, Any] | None, str | None]
"""Where a tool call runs: its run's context, the config of its task, its tool call id."""


def _tool_call_place(tool_call_id: str | None) -> _ToolCallPlace:
    """The running tool call's place in its graph: ``(None, None, tool_call_id)`` outside one
    (no context: a delegation from nobody, refused)."""
    try:
        config = get_config()
    except RuntimeError:  # not inside a runnable
        return None, None, tool_call_id
    runtime = get_runtime() if config.get("configurable") else None  # None: a runnable, no graph
    return getattr(runtime, "context", None), config, tool_call_id
