"""The gate's LangGraph middleware (agentgate/integrations/langgraph/: ``GateMiddleware`` under
``create_gated_agent`` and ``gated_tool_node``, and ``delegation_tool``): the idempotency scope of
a tool call, the refusals that end a run (and those that do not end a supervisor's), what a
refusal tells, approvals, and the output limit a model call is decided for; a run whose context
carries something else than an agent identity (``identity_from_context``) is a run without one.
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated, Any

import pytest
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool, InjectedToolCallId, StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command
from pydantic import Field
from test_dispatch_prefix import _wav
from test_langgraph import _entries, _make_team, _tools

from agentgate.errors import Denied
from agentgate.gate import AgentIdentity, Gate
from agentgate.integrations.langgraph import (
    ScriptedChatModel,
    create_gated_agent,
    delegation_tool,
    gated_tool_node,
    identity_from_context,
)
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

NAMES = ("root", "boss", "helper", "dana", "erin")


def _policy(dids: dict[str, str], budget: int) -> str:
    return f"""
version: 1
trust_anchors: {{root: {{did: "{dids["root"]}"}}}}
principals:
  boss: {{kind: agent, did: "{dids["boss"]}", roles: [boss, brief]}}
  helper: {{kind: agent, did: "{dids["helper"]}", roles: [helper]}}
  dana: {{kind: human, did: "{dids["dana"]}", roles: [owner]}}
  erin: {{kind: human, did: "{dids["erin"]}", roles: [owner]}}
tools:
  pay:
    args: {{amount: {{type: integer, required: true}}, card: {{type: string}}}}
    loggable: [amount]
  publish:
    args: {{path: {{type: string, required: true}}}}
    loggable: [path]
  search:
    args: {{query: {{type: string, required: true}}}}
    idempotent: true
  charge:
    args: {{card: {{type: string, required: true}}}}
models:
  scripted: {{cost_per_mtok: {{input: 1000000, output: 1000000}}}}
roles:
  boss:
    kind: agent
    capabilities:
      - resource: tool:pay
        constraints: {{amount: {{le: 100}}}}
      - resource: tool:publish
      - resource: tool:search
      - resource: tool:charge
        constraints: {{card: {{prefix: "tok_"}}}}
      - resource: model:scripted
    budget: {{limit: {budget}, unit: usd_micros}}
    ttl_s: 3600
    delegation:
      max_depth: 1
      max_ttl_s: 600
      capabilities:
        - resource: tool:search
        - resource: tool:pay
        - resource: model:scripted
  brief:
    kind: agent
    capabilities: [{{resource: tool:search}}, {{resource: tool:pay}}]
    ttl_s: 3
  helper:
    kind: agent
    capabilities:
      - resource: tool:search
      - resource: tool:pay
      - resource: model:scripted
    ttl_s: 1800
  owner:
    kind: human
    capabilities: [{{resource: tool:publish}}]
    ttl_s: 3600
approvals:
  publish:
    resource: tool:publish
    approvers: [dana]
    expiry_s: 600
"""


@dataclass
class Crew:
    gate: Gate
    keys: dict[str, SigningKey]
    boss: AgentIdentity
    ran: list[str] = field(default_factory=list)

    def tools(self) -> list[BaseTool]:
        def pay(amount: int, card: str = "") -> str:
            self.ran.append(f"pay:{amount}")
            return f"paid {amount}"

        def publish(path: str) -> str:
            self.ran.append(f"publish:{path}")
            return f"published {path}"

        def search(query: str) -> str:
            self.ran.append(f"search:{query}")
            return f"results for {query}"

        def charge(card: str) -> str:
            self.ran.append("charge")
            return "charged"

        return [
            StructuredTool.from_function(func=f, name=f.__name__, description=f"{f.__name__} tool")
            for f in (pay, publish, search, charge)
        ]

    def entries(self) -> list[Any]:
        self.gate.flush()
        return list(self.gate.audit.entries())


def _make(tmp_path: Path, budget: int = 1_000_000) -> Crew:
    keys = {n: SigningKey.generate() for n in NAMES}
    policy = parse_policy(_policy({n: k.did for n, k in keys.items()}, budget), source="crew.yaml")
    gate = Gate(policy, SQLiteStore(tmp_path / "agentgate.db"))
    boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
    return Crew(gate, keys, boss)


# Real components only: a policy parsed from YAML, a ``Gate`` on a real SQLite file, real LangGraph
# graphs (``create_gated_agent``, ``gated_tool_node``) run with ``ScriptedChatModel``.
@pytest.fixture
def crew(tmp_path: Path) -> Iterator[Crew]:
    made = _make(tmp_path)
    yield made
    made.gate.close()


@pytest.fixture
def crew_small(tmp_path: Path) -> Iterator[Crew]:
    """A crew whose boss has a budget of 6,000 micro-dollars (6,000 tokens of ``scripted``)."""
    made = _make(tmp_path, budget=6000)
    yield made
    made.gate.close()


def _calls(*calls: tuple[str, dict[str, Any]], answer_id: str | None = None) -> AIMessage:
    return AIMessage(
        content="",
        id=answer_id,
        tool_calls=[{"name": n, "args": a, "id": f"{n}-{i}"} for i, (n, a) in enumerate(calls)],
    )


def _tool_messages(result: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in result["messages"] if isinstance(m, ToolMessage)]


def _tool_graph(crew: Crew, checkpointer: Any = None) -> Any:
    graph = StateGraph(MessagesState)
    graph.add_node("tools", gated_tool_node(crew.gate, crew.tools(), agent="boss"))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    return graph.compile(checkpointer=checkpointer)


# --- the idempotency scope of a call -------------------------------------------------------------


@pytest.mark.parametrize("threaded", [True, False])
def test_the_same_answer_in_two_runs_is_two_calls_that_each_run(crew: Crew, threaded: bool) -> None:
    """Kills g1 (``_run_id`` scoped by the answer's id alone, not its thread) and g38
    (``_thread_scope`` naming a thread "None" for a run without one): the same answer, ids and
    all, handed to two runs (a cache, a replayed input) is two calls, and each one runs once."""
    app = _tool_graph(crew, InMemorySaver() if threaded else None)
    answer = _calls(("pay", {"amount": 5}), answer_id="answer-1")
    for thread in ("a", "b"):
        config = {"configurable": {"thread_id": thread}} if threaded else {}
        result = app.invoke({"messages": [answer]}, config, context=crew.boss)
        assert [m.status for m in _tool_messages(result)] == ["success"]
    assert crew.ran == ["pay:5", "pay:5"]
    allows = [e for e in crew.entries() if e.kind == "allow" and e.resource == "tool:pay"]
    assert len(allows) == 2


def _helper_graph(crew: Crew, answer: AIMessage) -> Any:
    """A hand-built sub-agent whose "model" always gives the same answer, id and all (as a cache
    would), then runs its calls through its own gated tools node."""

    def think(state: MessagesState) -> dict[str, Any]:
        return {"messages": [answer]}

    graph = StateGraph(MessagesState)
    graph.add_node("think", think)
    graph.add_node("tools", gated_tool_node(crew.gate, crew.tools(), agent="helper"))
    graph.add_edge(START, "think")
    graph.add_edge("think", "tools")
    graph.add_edge("tools", END)
    return graph.compile()


def _ask_helper(crew: Crew, agent: Any, **extra: Any) -> BaseTool:
    terms: dict[str, Any] = {
        "capabilities": ["tool:pay?amount<=100", "tool:search"],
        "ttl": timedelta(minutes=5),
    }
    terms.update(extra)
    return delegation_tool(crew.gate, name="helper", agent=agent, key=crew.keys["helper"], **terms)


def test_two_delegations_in_one_thread_whose_sub_agent_gave_the_same_answer_each_run(crew: Crew) -> None:
    """Kills g2 (``_thread_scope`` dropping the outer tasks of ``checkpoint_ns``): two delegations
    in one supervisor thread, whose sub-agent answered the same (ids and all), are two scopes: the
    second sub-agent's payment is its own call and runs, not refused as the first one's."""
    helper = _helper_graph(crew, _calls(("pay", {"amount": 7}), answer_id="cached-answer"))
    ask = _ask_helper(crew, helper)
    model = ScriptedChatModel(
        turns=[_calls(("ask_helper", {"task": "one"}), ("ask_helper", {"task": "two"}))]
    )
    boss = create_gated_agent(
        crew.gate, name="boss", model=model, tools=[ask], checkpointer=InMemorySaver(), gate_models=False
    )
    result = boss.invoke(
        {"messages": [{"role": "user", "content": "go"}]},
        {"configurable": {"thread_id": "t"}},
        context=crew.boss,
    )
    assert [m.status for m in _tool_messages(result)] == ["success", "success"]
    assert crew.ran == ["pay:7", "pay:7"]
    helper_did = crew.keys["helper"].did
    allows = [e for e in crew.entries() if e.kind == "allow" and e.resource == "tool:pay"]
    assert [e.principal for e in allows] == [helper_did, helper_did]


# --- a refusal that no later call can overcome ends the run ------------------------------------


def test_a_nested_agent_on_its_parents_identity_is_stopped_after_its_first_refusal(crew: Crew) -> None:
    """Kills g43 (``inherited_identity`` left out of ``_DEAD_IDENTITY``): a nested agent running on
    its parent's identity is refused (``implicit_trust_inheritance``) and its run ends there: its
    model is not asked again for calls that can only be refused."""
    turns = [_calls(("search", {"query": "a"})), _calls(("search", {"query": "b"}))]
    nested = create_gated_agent(
        crew.gate, name="helper", model=ScriptedChatModel(turns=turns), tools=crew.tools(), gate_models=False
    )
    result = nested.invoke({"messages": [{"role": "user", "content": "x"}]}, context=crew.boss)
    (refused,) = _tool_messages(result)
    assert refused.status == "error" and "implicit_trust_inheritance" in str(refused.content)
    last = result["messages"][-1]
    assert isinstance(last, AIMessage) and not last.tool_calls
    assert "implicit_trust_inheritance" in str(last.content)
    assert crew.ran == []


def test_a_sub_agent_stopped_on_its_revoked_grant_does_not_end_the_supervisors_run(crew: Crew) -> None:
    """Kills g8 (the stop mark saying "budget exhausted" for every refusal that ends a run) and g27
    (``_ran_out`` reading the stop mark, not the budget mark, of a sub-agent's last answer): a
    sub-agent whose own grant is revoked mid-run ends its run, but that is not a budget that ran
    out: the supervisor, whose grant is intact, goes on with its next call (only a sub-agent that
    ran out of budget before paying for anything ends the supervisor's run)."""

    def search(query: str) -> str:
        (_, child), *_ = crew.gate.delegations
        crew.gate.revoke(child, reason="the helper's key leaked")
        crew.ran.append(f"search:{query}")
        return "revoked my own grant"

    revoker = StructuredTool.from_function(func=search, name="search", description="search")
    helper = create_gated_agent(
        crew.gate,
        name="helper",
        model=ScriptedChatModel(turns=[_calls(("search", {"query": "x"})), _calls(("pay", {"amount": 2}))]),
        tools=[revoker, crew.tools()[0]],
        gate_models=False,
    )
    ask = _ask_helper(crew, helper, budget=10_000)
    boss = create_gated_agent(
        crew.gate,
        name="boss",
        model=ScriptedChatModel(
            turns=[_calls(("ask_helper", {"task": "t"})), _calls(("pay", {"amount": 3}))]
        ),
        tools=[ask, *crew.tools()],
        gate_models=False,
    )
    result = boss.invoke({"messages": [{"role": "user", "content": "go"}]}, context=crew.boss)
    delegated, paid = _tool_messages(result)
    assert delegated.status == "success" and "revoked" in str(delegated.content)
    assert paid.status == "success"
    assert crew.ran == ["search:x", "pay:3"]


def test_a_sub_agent_that_spent_part_of_its_budget_then_ran_out_does_not_end_the_supervisors_run(
    crew: Crew,
) -> None:
    """Kills g26 (``_paid_for_nothing`` true for any delegated grant with a budget): a sub-agent
    that paid for some of its calls and then ran out of its own budget is answered as usual; only
    one refused before paying anything ends the supervisor's run. The supervisor goes on."""
    turns = [_calls(("search", {"query": f"q{i}"})) for i in range(30)]
    # Only the tool it calls: each model call reserves the schemas of the tools bound to it too.
    searches = [tool for tool in crew.tools() if tool.name == "search"]
    helper = create_gated_agent(
        crew.gate, name="helper", model=ScriptedChatModel(turns=turns), tools=searches, max_tokens=40
    )
    ask = _ask_helper(
        crew, helper, budget=200, capabilities=["tool:pay?amount<=100", "tool:search", "model:scripted"]
    )
    boss = create_gated_agent(
        crew.gate,
        name="boss",
        model=ScriptedChatModel(
            turns=[_calls(("ask_helper", {"task": "t"})), _calls(("pay", {"amount": 3}))]
        ),
        tools=[ask, *crew.tools()],
        gate_models=False,
    )
    result = boss.invoke(
        {"messages": [{"role": "user", "content": "go"}]}, {"recursion_limit": 200}, context=crew.boss
    )
    delegated, paid = _tool_messages(result)
    assert "budget exhausted" in str(delegated.content)
    (_, child), *_ = crew.gate.delegations
    spent, limit = crew.gate.budget_usage(child)[child.grant_id]
    assert 0 < spent <= limit == 200
    assert paid.status == "success" and crew.ran[-1] == "pay:3"


# --- what a refusal tells ----------------------------------------------------------------------


def test_an_enforced_refusal_raises_without_the_value_of_an_argument_that_is_not_loggable(crew: Crew) -> None:
    """Kills g10 (``Denied`` raised with ``auth.explain()`` instead of ``Gate.explain_redacted``):
    the text of a raised ``Denied`` reaches logs and tracebacks, so the value of an argument the
    policy does not mark loggable (a card number) is not in it; the model-facing refusal, without
    ``enforce``, names the value the model itself chose."""
    secret = "4111-1111-SECRET"
    answer = _calls(("charge", {"card": secret}))
    agent = create_gated_agent(
        crew.gate, name="boss", model=ScriptedChatModel(turns=[answer]), tools=crew.tools(), gate_models=False
    )
    told = agent.invoke({"messages": [{"role": "user", "content": "go"}]}, context=crew.boss)
    (refused,) = _tool_messages(told)
    assert refused.status == "error" and secret in str(refused.content)  # the model's own argument
    enforced = create_gated_agent(
        crew.gate,
        name="boss",
        model=ScriptedChatModel(turns=[answer]),
        tools=crew.tools(),
        gate_models=False,
        enforce=True,
    )
    with pytest.raises(Denied) as raised:
        enforced.invoke({"messages": [{"role": "user", "content": "go"}]}, context=crew.boss)
    assert "tool:charge" in str(raised.value) and secret not in str(raised.value)
    assert crew.ran == []


# --- the async path ----------------------------------------------------------------------------


async def test_under_ainvoke_a_nested_agent_on_its_parents_identity_cannot_delegate(crew: Crew) -> None:
    """Kills g18 (``awrap_tool_call`` skipping the refusal of a delegation asked on a foreign
    identity): under ``ainvoke`` too, an agent running on another agent's identity (a nested
    agent that inherited its parent's context) cannot hand that identity's rights on to a
    sub-agent: refused (``implicit_trust_inheritance``), no grant made, the sub-agent never runs."""
    helper = create_gated_agent(
        crew.gate,
        name="helper",
        model=ScriptedChatModel(turns=[_calls(("pay", {"amount": 9}))]),
        tools=crew.tools(),
        gate_models=False,
    )
    ask = _ask_helper(crew, helper)
    stowaway = create_gated_agent(
        crew.gate,
        name="stowaway",
        model=ScriptedChatModel(turns=[_calls(("ask_helper", {"task": "go"}))]),
        tools=[ask],
        gate_models=False,
    )
    result = await stowaway.ainvoke({"messages": [{"role": "user", "content": "x"}]}, context=crew.boss)
    (refused,) = _tool_messages(result)
    assert refused.status == "error" and "implicit_trust_inheritance" in str(refused.content)
    assert crew.ran == [] and crew.gate.delegations == []
    denies = [e for e in crew.entries() if e.kind == "deny"]
    assert any("implicit_trust_inheritance:inherited_identity" in r for e in denies for r in e.reasons)


# --- approval gates ----------------------------------------------------------------------------


def _publisher(crew: Crew, checkpointer: Any, path: str = "reports/a") -> Any:
    return create_gated_agent(
        crew.gate,
        name="boss",
        model=ScriptedChatModel(turns=[_calls(("publish", {"path": path}))]),
        tools=crew.tools(),
        checkpointer=checkpointer,
        gate_models=False,
    )


def test_a_reused_approval_is_refused_and_leaves_no_request_open(crew: Crew) -> None:
    """Kills g12 (the request a resumed call opened left pending when the call is refused with the
    approval given): an approval already used, replayed to resume the same call asked again in a
    later answer of its thread, is refused; the publish does not run again, and the request the
    later answer asked for is closed in the log (a ``deny``), not left for approvers to answer.
    (Until review R55 the replay was in another thread, which then shared the request; there it
    is now not counted and asked again: tests/test_langgraph_approvals_and_enforce.py.)"""
    publish = _calls(("publish", {"path": "reports/a"}))
    agent = create_gated_agent(
        crew.gate,
        name="boss",
        model=ScriptedChatModel(turns=[publish, publish, AIMessage(content="done")]),
        tools=crew.tools(),
        checkpointer=InMemorySaver(),
        gate_models=False,
    )
    thread = {"configurable": {"thread_id": "one"}}
    paused = agent.invoke({"messages": [{"role": "user", "content": "go"}]}, thread, context=crew.boss)
    approval = crew.gate.approve(paused["__interrupt__"][0].value, crew.keys["dana"])
    paused = agent.invoke(Command(resume=approval), thread, context=crew.boss)
    assert crew.ran == ["publish:reports/a"]

    assert "__interrupt__" in paused and len(crew.gate.approvals.open_records()) == 1
    replayed = agent.invoke(Command(resume=approval), thread, context=crew.boss)
    assert "__interrupt__" not in replayed
    refused = _tool_messages(replayed)[-1]
    assert refused.status == "error" and "already used" in str(refused.content)
    assert crew.ran == ["publish:reports/a"]
    assert crew.gate.approvals.open_records() == []
    kinds = [e.kind for e in crew.entries() if e.resource == "tool:publish"]
    assert kinds.count("allow") == 1 and kinds[-1] == "deny"


def test_a_delegation_refused_on_a_revoked_supervisor_grant_ends_the_supervisors_run(crew: Crew) -> None:
    """Kills g19 (a delegation that raised ``Revoked`` not marked as the end of the run) and h27
    (``_failure`` dropping the stop mark of such a failure): once the
    supervisor's grant is revoked, its delegation fails, the sub-agent never runs, and its (ungated)
    model is not asked again for calls that can only be refused."""
    helper = create_gated_agent(
        crew.gate,
        name="helper",
        model=ScriptedChatModel(turns=[_calls(("pay", {"amount": 1}))]),
        tools=crew.tools(),
        gate_models=False,
    )
    ask = _ask_helper(crew, helper)
    turns = [
        _calls(("ask_helper", {"task": "a"})),
        _calls(("ask_helper", {"task": "b"})),
        _calls(("pay", {"amount": 2})),
    ]
    boss = create_gated_agent(
        crew.gate,
        name="boss",
        model=ScriptedChatModel(turns=turns),
        tools=[ask, *crew.tools()],
        gate_models=False,
    )
    crew.gate.revoke(crew.boss, reason="compromised")
    result = boss.invoke({"messages": [{"role": "user", "content": "go"}]}, context=crew.boss)
    (failed,) = _tool_messages(result)
    assert failed.status == "error" and "revoked" in str(failed.content).lower()
    last = result["messages"][-1]
    assert isinstance(last, AIMessage) and not last.tool_calls
    assert crew.ran == [] and crew.gate.delegations == []


@pytest.mark.parametrize("asynchronous", [False, True])
async def test_a_tool_whose_name_is_no_resource_name_is_refused_and_recorded_not_crashed(
    crew: Crew, asynchronous: bool
) -> None:
    """Kills h11 (``_refused_call`` letting the ``InputError`` of an undecidable name escape): a
    registered tool whose name is no resource name (``Lookup``: upper case) is never decided, so
    never run; the model is told why, and the refusal is recorded as a ``deny`` on the name as
    asked; the run does not end with a traceback."""

    def lookup(query: str) -> str:
        crew.ran.append("Lookup")
        return "found"

    tool = StructuredTool.from_function(func=lookup, name="Lookup", description="look up")
    graph = StateGraph(MessagesState)
    graph.add_node("tools", gated_tool_node(crew.gate, [tool], agent="boss"))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    app = graph.compile()
    state = {"messages": [_calls(("Lookup", {"query": "q"}))]}
    result = (
        await app.ainvoke(state, context=crew.boss) if asynchronous else app.invoke(state, context=crew.boss)
    )
    (refused,) = _tool_messages(result)
    assert refused.status == "error" and "not canonical" in str(refused.content)
    assert crew.ran == []
    denies = [e for e in crew.entries() if e.kind == "deny"]
    assert [e.resource for e in denies] == ["tool:Lookup"]


class _OwnLimit(ScriptedChatModel):
    """A scripted model configured with its own ``max_tokens`` (as ChatOpenAI may be); records the
    output limit each call ran with."""

    max_tokens: int | None = None
    seen: list[Any] = Field(default_factory=list)

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self.bind(**kwargs)

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        self.seen.append(kwargs.get("max_tokens", self.max_tokens))
        return super()._generate(messages, stop, run_manager, **kwargs)


class _AskLess(AgentMiddleware):  # type: ignore[type-arg]
    """A middleware outside the gate that asks each model call for 100 output tokens."""

    def wrap_model_call(self, request: Any, handler: Any) -> Any:
        return handler(request.override(model_settings={**request.model_settings, "max_tokens": 100}))


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_model_call_reserves_its_system_prompt_so_a_budget_it_cannot_pay_refuses_it(
    tmp_path: Path, mode: str
) -> None:
    """Review R51: a model call's reservation counted the request's messages, which leave the
    system message out, so an agent with a system prompt of about 10,000 tokens reserved 1,025
    micro-dollars of a 6,000 budget, ran, and overran the budget by more than 4,000 (the
    provider bills what was sent). The system prompt is counted: the call is refused before the
    model runs, and nothing is spent or overrun."""
    crew = _make(tmp_path, budget=6000)
    try:
        agent = create_gated_agent(
            crew.gate,
            name="boss",
            model=ScriptedChatModel(turns=[]),
            system_prompt="You are careful. " * 2500,
        )
        go = {"messages": [{"role": "user", "content": "go"}]}
        ended = (
            agent.invoke(go, context=crew.boss)
            if mode == "sync"
            else await agent.ainvoke(go, context=crew.boss)
        )
        assert "budget" in str(ended["messages"][-1].content)
        models = [e for e in crew.entries() if e.resource == "model:scripted"]
        assert [e.kind for e in models] == ["deny"]
        assert crew.gate.budget_usage(crew.boss)[crew.boss.chain.root.id] == (0, 6000)
    finally:
        crew.gate.close()


def test_a_model_call_reserves_the_tool_call_arguments_it_sends_back(crew_small: Crew) -> None:
    """Review R51: the reservation counted each message's content only; an answer's tool calls
    (content ``""``) are sent back to the model with their arguments, so a conversation whose
    call carried 40,000 characters reserved about 1,030 micro-dollars of a 6,000 budget for a
    call billed above 10,000. They are counted: the second model call is refused before it
    runs."""
    card = "tok_" + "9" * 40_000
    model = ScriptedChatModel(turns=[_calls(("charge", {"card": card}))])
    agent = create_gated_agent(crew_small.gate, name="boss", model=model, tools=crew_small.tools())
    ended = agent.invoke({"messages": [{"role": "user", "content": "go"}]}, context=crew_small.boss)
    assert crew_small.ran == ["charge"]
    assert "budget" in str(ended["messages"][-1].content)
    models = [e.kind for e in crew_small.entries() if e.resource == "model:scripted" and e.kind != "outcome"]
    assert models == ["allow", "deny"]


def test_a_model_call_reserves_the_tool_schemas_it_sends(crew_small: Crew) -> None:
    """Review R51: the tools' schemas (names, descriptions, argument schemas) are sent with every
    model call and billed as input, and were not counted: a tool described in 40,000 characters
    reserved about 1,025 micro-dollars of a 6,000 budget. They are: the call is refused before
    the model runs."""

    def search(query: str) -> str:
        crew_small.ran.append(f"search:{query}")
        return "results"

    described = StructuredTool.from_function(func=search, name="search", description="Search. " * 5000)
    agent = create_gated_agent(
        crew_small.gate, name="boss", model=ScriptedChatModel(turns=[]), tools=[described]
    )
    ended = agent.invoke({"messages": [{"role": "user", "content": "go"}]}, context=crew_small.boss)
    assert "budget" in str(ended["messages"][-1].content)
    assert [e.kind for e in crew_small.entries() if e.resource == "model:scripted"] == ["deny"]


def test_a_model_call_is_decided_for_the_output_limit_its_request_asks_not_the_models_own(
    tmp_path: Path,
) -> None:
    """Kills h10 (the chat model's own ``max_tokens`` taking precedence over the request's): a
    request that asks for 100 output tokens is decided (and its cost reserved) for 100 and runs
    with 100, though the model is configured for 8192, which the budget could not pay for."""
    crew = _make(tmp_path, budget=1_000)
    try:
        model = _OwnLimit(turns=[_calls(("search", {"query": "x"}))], max_tokens=8192)
        agent = create_gated_agent(
            crew.gate, name="boss", model=model, tools=crew.tools(), middleware=[_AskLess()]
        )
        result = agent.invoke({"messages": [{"role": "user", "content": "go"}]}, context=crew.boss)
        assert crew.ran == ["search:x"] and model.seen and set(model.seen) == {100}
        assert "budget" not in str(result["messages"][-1].content)
    finally:
        crew.gate.close()


def test_a_refusal_that_ended_an_earlier_turn_does_not_stop_the_next_turn_of_the_thread(crew: Crew) -> None:
    """Kills g31 (``_run_stop`` looking past the model's last answer): the stop mark of a refusal
    ends the run it happened in only; the same thread continued later on a fresh grant (the
    operator issued one after the revocation) asks the model again and runs its call."""
    turns = [_calls(("pay", {"amount": 1})), AIMessage(content="unused"), _calls(("pay", {"amount": 2}))]
    agent = create_gated_agent(
        crew.gate,
        name="boss",
        model=ScriptedChatModel(turns=turns),
        tools=crew.tools(),
        checkpointer=InMemorySaver(),
        gate_models=False,
    )
    config = {"configurable": {"thread_id": "t"}}
    crew.gate.revoke(crew.boss, reason="rotated")
    ended = agent.invoke({"messages": [{"role": "user", "content": "pay 1"}]}, config, context=crew.boss)
    assert "revoked" in str(ended["messages"][-1].content) and crew.ran == []
    fresh = crew.gate.issue(crew.keys["root"], name="boss", key=crew.keys["boss"], role="boss")
    again = agent.invoke({"messages": [{"role": "user", "content": "pay 2"}]}, config, context=fresh)
    assert crew.ran == ["pay:2"]
    assert _tool_messages(again)[-1].status == "success"


@pytest.mark.parametrize("form", ["command", "list-of-messages", "list-of-commands"])
def test_a_tool_whose_answer_carries_an_error_message_is_recorded_as_failed_and_may_run_again(
    crew: Crew, form: str
) -> None:
    """Kills g36 (``_failed`` never seeing a failure inside the ``Command`` a tool answers with):
    a tool that reports its failure in the message of its ``Command`` (``status="error"``) is
    recorded with an ``error`` outcome, not ``ok``; and a call that must run once and failed so
    is not "done": asked again, it runs again instead of being answered with the kept failure.

    Review R51: the same for the list of ``ToolMessage``s or ``Command``s a tool may answer with
    (LangGraph's ``ToolNode`` passes it on as the call's result): such a list was recorded as an
    ``ok`` outcome, charged, and, being "done", refused when asked again."""
    tries: list[int] = []

    def pay(amount: int, tool_call_id: Annotated[str, InjectedToolCallId]) -> Any:
        tries.append(amount)
        status = "error" if len(tries) == 1 else "success"
        message = ToolMessage(content=f"attempt {len(tries)}", tool_call_id=tool_call_id, status=status)
        command = Command(update={"messages": [message]})
        return {"command": command, "list-of-messages": [message], "list-of-commands": [command]}[form]

    tool = StructuredTool.from_function(func=pay, name="pay", description="pay")
    graph = StateGraph(MessagesState)
    graph.add_node("tools", gated_tool_node(crew.gate, [tool], agent="boss"))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    app = graph.compile()
    answer = _calls(("pay", {"amount": 5}), answer_id="same-answer")
    first = app.invoke({"messages": [answer]}, context=crew.boss)
    assert [m.status for m in _tool_messages(first)] == ["error"]
    outcomes = [e for e in crew.entries() if e.kind == "outcome" and e.resource == "tool:pay"]
    assert [e.status for e in outcomes] == ["error"]
    second = app.invoke({"messages": [answer]}, context=crew.boss)
    assert tries == [5, 5]
    assert [m.status for m in _tool_messages(second)] == ["success"]


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_a_tool_a_middleware_serves_in_place_of_the_one_named_is_decided_as_itself(
    crew: Crew, mode: str
) -> None:
    """Review R51: a middleware outside the gate may hand on another tool than the one the call
    names (``request.override(tool=...)``, LangChain's way to serve a tool at run time). The call
    was decided, and recorded, under the name the model wrote: a ``search`` call served by
    ``publish`` ran ``publish``, which needs dana's approval, on an allow of ``search``, recorded
    as a search. It is decided as the tool that runs."""

    def publish(path: str) -> str:
        crew.ran.append(f"publish:{path}")
        return "published"

    served = StructuredTool.from_function(func=publish, name="publish", description="publish")

    def aliased(request: Any) -> Any:
        wanted = request.tool_call["args"].get("path") if request.tool_call["name"] == "search" else None
        return request.override(tool=served) if wanted else request

    class Aliases(AgentMiddleware[Any, Any, Any]):
        def wrap_tool_call(self, request: Any, handler: Any) -> Any:
            return handler(aliased(request))

        async def awrap_tool_call(self, request: Any, handler: Any) -> Any:
            return await handler(aliased(request))

    def search(query: str = "", path: str = "") -> str:
        crew.ran.append(f"search:{query}")
        return "results"

    agent = create_gated_agent(
        crew.gate,
        name="boss",
        model=ScriptedChatModel(turns=[_calls(("search", {"path": "reports/q3"}))]),
        tools=[StructuredTool.from_function(func=search, name="search", description="search")],
        gate_models=False,
        checkpointer=InMemorySaver(),
        middleware=[Aliases()],
    )
    config = {"configurable": {"thread_id": f"alias-{mode}"}}
    go = {"messages": [{"role": "user", "content": "go"}]}
    paused = (
        agent.invoke(go, config, context=crew.boss)
        if mode == "sync"
        else await agent.ainvoke(go, config, context=crew.boss)
    )
    assert crew.ran == []  # publish waits for dana's approval: it was decided as publish
    (asked,) = paused["__interrupt__"]
    assert asked.value["request"]["resource"] == "tool:publish"
    assert [(e.kind, e.resource) for e in crew.entries() if e.resource.startswith("tool:")] == [
        ("approval_required", "tool:publish")
    ]


def test_a_call_refused_on_an_expired_grant_ends_the_run_at_the_next_turn(crew: Crew) -> None:
    """Kills h17 (``grant_expired`` left out of ``_DEAD_IDENTITY``): once a call is refused because
    the run's grant expired, every later call would be too: the run ends on that refusal, and the
    (ungated) model is not asked again."""
    brief = crew.gate.issue(crew.keys["root"], name="boss", key=crew.keys["boss"], role="brief")

    def search(query: str) -> str:
        while time.time() <= brief.chain.tip.expires:  # until the three-second grant has expired
            time.sleep(0.05)
        return "slow results"

    slow = StructuredTool.from_function(func=search, name="search", description="search")
    turns = [
        _calls(("search", {"query": "q"})),
        _calls(("pay", {"amount": 1})),
        _calls(("pay", {"amount": 2})),
    ]
    agent = create_gated_agent(
        crew.gate,
        name="boss",
        model=ScriptedChatModel(turns=turns),
        tools=[slow, crew.tools()[0]],
        gate_models=False,
    )
    result = agent.invoke({"messages": [{"role": "user", "content": "go"}]}, context=brief)
    searched, refused, *later = _tool_messages(result)
    assert (
        searched.status == "success" and refused.status == "error" and "grant_expired" in str(refused.content)
    )
    assert later == [] and crew.ran == []
    last = result["messages"][-1]
    assert isinstance(last, AIMessage) and not last.tool_calls


def test_with_enforce_a_sub_agents_refusal_reaches_the_caller_with_its_decision(crew: Crew) -> None:
    """Kills g44 (the supervisor re-wrapping the sub-agent's ``Denied`` in a new one): with
    ``enforce``, the refusal of a delegated sub-agent's call is raised to the caller as it was
    raised, with the decision that says which call was refused and why (not a bare message)."""
    helper = create_gated_agent(
        crew.gate,
        name="helper",
        model=ScriptedChatModel(turns=[_calls(("pay", {"amount": 500}))]),
        tools=crew.tools(),
        gate_models=False,
        enforce=True,
    )
    ask = _ask_helper(crew, helper)
    boss = create_gated_agent(
        crew.gate,
        name="boss",
        model=ScriptedChatModel(turns=[_calls(("ask_helper", {"task": "pay 500"}))]),
        tools=[ask],
        gate_models=False,
        enforce=True,
    )
    with pytest.raises(Denied) as raised:
        boss.invoke({"messages": [{"role": "user", "content": "go"}]}, context=crew.boss)
    decision = raised.value.decision
    assert decision is not None and "tool:pay" in str(raised.value)
    assert crew.ran == []


@pytest.mark.parametrize("carried", ["supervisor", {"name": "supervisor"}, None])
def test_a_run_context_that_carries_something_else_than_an_identity_is_a_run_without_one(
    tmp_path: Path, carried: object
) -> None:
    # l05: ``identity_from_context`` returned whatever a context's ``agentgate`` attribute or key
    # held; a run whose context carries a name or a dict there crashed in the middleware with an
    # AttributeError (``'str' object has no attribute 'did'``) instead of the refusal of a run
    # without an identity: recorded, nothing run.
    assert identity_from_context({"agentgate": carried}) is None
    assert identity_from_context(SimpleNamespace(agentgate=carried)) is None
    team = _make_team(tmp_path)
    try:
        assert identity_from_context({"agentgate": team.supervisor}) is team.supervisor
        agent = create_gated_agent(
            team.gate,
            name="supervisor",
            model=ScriptedChatModel(turns=[_calls(("search", {"query": "q"}))]),
            tools=_tools(team),
            gate_models=False,
        )
        result = agent.invoke(
            {"messages": [{"role": "user", "content": "go"}]}, context=SimpleNamespace(agentgate=carried)
        )
        (refused,) = [m for m in result["messages"] if isinstance(m, ToolMessage)]
        assert refused.status == "error" and "carries no agent identity" in str(refused.content)
        assert team.ran == []
        denies = [e for e in _entries(team.gate) if e.kind == "deny" and e.resource == "tool:search"]
        assert len(denies) == 1
    finally:
        team.gate.close()


# --- a model name that names no model resource -------------------------------------------------


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"model": ScriptedChatModel(turns=[], model_name="gpt 4o")}, "'gpt 4o' (the chat model's own name)"),
        (
            {"model": ScriptedChatModel(turns=[]), "model_name": "Llama 3@8B"},
            "'Llama 3@8B' (the name given for the model)",
        ),
    ],
)
def test_a_model_name_that_names_no_model_resource_is_refused_when_the_agent_is_built(
    crew: Crew, given: dict[str, Any], named: str
) -> None:
    # Review R52: the agent was built, and its first model call raised CapabilityError out of
    # the run, naming neither the agent nor where the name came from.
    from agentgate.errors import CapabilityError
    from agentgate.integrations.langgraph import GateMiddleware

    with pytest.raises(CapabilityError, match=rf"agentgate\[boss\]: the model name {re.escape(named)}"):
        create_gated_agent(crew.gate, name="boss", tools=crew.tools(), **given)
    with pytest.raises(CapabilityError, match="cannot name a model resource"):
        GateMiddleware(crew.gate, agent="boss", model="gpt 4o")
    # Not gating models, or a name the policy can use: built as before.
    create_gated_agent(crew.gate, name="boss", tools=crew.tools(), gate_models=False, **given)
    GateMiddleware(crew.gate, agent="boss", model="meta-llama/Llama-3.1-8B-Instruct")
    assert [e for e in crew.entries() if e.resource.startswith("model:")] == []


# --- a tool the agent does not have --------------------------------------------------------------


@pytest.mark.parametrize("asynchronous", [False, True])
@pytest.mark.parametrize("built", ["create_gated_agent", "gated_tool_node"])
async def test_a_call_of_a_tool_the_agent_does_not_have_is_recorded_as_a_refusal(
    crew: Crew, asynchronous: bool, built: str
) -> None:
    # Review R52: LangChain's ToolNode answered such a call itself ("not a valid tool") and the
    # gate let it through unrecorded, though a model asking for a tool that is not there is
    # evidence a reviewer wants. It is now a ``deny`` on the name as asked; ToolNode's answer,
    # which names the tools there are, still goes to the model, and nothing runs.
    ask = _calls(("search", {"query": "q"}), ("wire_money", {"to": "x"}), ("Drop Tables", {}))
    if built == "create_gated_agent":
        app = create_gated_agent(
            crew.gate,
            name="boss",
            model=ScriptedChatModel(turns=[ask]),
            tools=crew.tools(),
            gate_models=False,
        )
        state: dict[str, Any] = {"messages": [{"role": "user", "content": "go"}]}
    else:
        graph = StateGraph(MessagesState)
        graph.add_node("tools", gated_tool_node(crew.gate, crew.tools(), agent="boss"))
        graph.add_edge(START, "tools")
        graph.add_edge("tools", END)
        app = graph.compile()
        state = {"messages": [ask]}
    result = (
        await app.ainvoke(state, context=crew.boss) if asynchronous else app.invoke(state, context=crew.boss)
    )
    answers = {m.tool_call_id: m for m in _tool_messages(result)}
    assert answers["search-0"].status == "success" and crew.ran == ["search:q"]
    for call_id in ("wire_money-1", "Drop Tables-2"):
        assert answers[call_id].status == "error" and "not a valid tool" in str(answers[call_id].content)
    denies = [e for e in crew.entries() if e.kind == "deny"]
    assert sorted((e.resource, e.principal, e.reasons) for e in denies) == [
        ("tool:Drop Tables", crew.boss.did, ("the agent has no tool named 'Drop Tables'; nothing ran",)),
        ("tool:wire_money", crew.boss.did, ("the agent has no tool named 'wire_money'; nothing ran",)),
    ]
    assert all(e.args == {} for e in denies)  # no policy says these arguments are loggable
    assert crew.gate.verify().ok


@pytest.mark.parametrize("asynchronous", [False, True])
async def test_with_enforce_a_call_of_a_tool_the_agent_does_not_have_raises_denied_after_it_is_recorded(
    crew: Crew, asynchronous: bool
) -> None:
    graph = StateGraph(MessagesState)
    graph.add_node("tools", gated_tool_node(crew.gate, crew.tools(), agent="boss", enforce=True))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    app = graph.compile()
    state = {"messages": [_calls(("wire_money", {"to": "x"}))]}
    with pytest.raises(Denied, match="no tool named 'wire_money'"):
        await app.ainvoke(state, context=crew.boss) if asynchronous else app.invoke(state, context=crew.boss)
    assert [(e.kind, e.resource) for e in crew.entries() if e.kind == "deny"] == [("deny", "tool:wire_money")]


# --- tool call ids shared within one answer ------------------------------------------------------


@pytest.mark.parametrize("asynchronous", [False, True])
@pytest.mark.parametrize("built", ["create_gated_agent", "gated_tool_node"])
@pytest.mark.parametrize("checkpointer", [False, True])
@pytest.mark.parametrize("second", [10, 20], ids=["same-args", "other-args"])
async def test_calls_of_one_answer_that_share_an_id_are_all_refused_however_the_agent_runs(
    crew: Crew, asynchronous: bool, built: str, checkpointer: bool, second: int
) -> None:
    # Review R52: what ran depended on how the agent ran. Under create_agent without a
    # checkpointer both calls ran (each is a task of its own: two scopes), so a payment asked twice
    # under one id paid twice; with a checkpointer, or in one gated_tool_node task, the second was
    # refused as already run when its arguments were the same, and ran when they differed. A call
    # id names one call: every call sharing it is refused, recorded, and nothing of them runs; the
    # answer's other calls run as usual.
    ask = AIMessage(
        content="",
        id="answer-1",
        tool_calls=[
            {"name": "pay", "args": {"amount": 10}, "id": "c1"},
            {"name": "pay", "args": {"amount": second}, "id": "c1"},
            {"name": "search", "args": {"query": "q"}, "id": "c2"},
        ],
    )
    saver = InMemorySaver() if checkpointer else None
    if built == "create_gated_agent":
        model = ScriptedChatModel(turns=[ask])
        app = create_gated_agent(
            crew.gate, name="boss", model=model, tools=crew.tools(), gate_models=False, checkpointer=saver
        )
        state: dict[str, Any] = {"messages": [{"role": "user", "content": "go"}]}
    else:
        app = _tool_graph(crew, checkpointer=saver)
        state = {"messages": [ask]}
    config = {"configurable": {"thread_id": "t"}} if checkpointer else {}
    result = (
        await app.ainvoke(state, config, context=crew.boss)
        if asynchronous
        else app.invoke(state, config, context=crew.boss)
    )
    assert crew.ran == ["search:q"]
    shared = [m for m in _tool_messages(result) if m.tool_call_id == "c1"]
    assert shared and all(
        m.status == "error" and "gives the tool call id 'c1' to 2 calls" in m.content for m in shared
    )
    denies = [e for e in crew.entries() if e.resource == "tool:pay"]
    assert [e.kind for e in denies] == ["deny", "deny"]
    assert all("a call id names one call, so none of them is run" in e.reasons[0] for e in denies)


@pytest.mark.parametrize(
    "part",
    [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 400_000}},
        {"type": "image", "source_type": "base64", "mime_type": "image/png", "data": "A" * 400_000},
    ],
    ids=["openai", "langchain"],
)
def test_a_model_call_reserves_an_image_at_its_fixed_estimate_not_its_datas_length(
    crew_small: Crew, part: dict[str, Any]
) -> None:
    """Review R52: an image content part was counted by its characters, so a 300 KB photo sent as
    base64 reserved about 100,000 tokens of a 6,000 budget and the call was refused. It counts as
    ``IMAGE_TOKENS`` (1,445), as the dispatcher estimates it: the call runs. Its text still counts."""
    agent = create_gated_agent(crew_small.gate, name="boss", model=ScriptedChatModel(turns=[]))
    look = {"role": "user", "content": [{"type": "text", "text": "what is this?"}, part]}
    ended = agent.invoke({"messages": [look]}, context=crew_small.boss)
    assert "budget" not in str(ended["messages"][-1].content)
    assert [e.kind for e in crew_small.entries() if e.resource == "model:scripted"] == ["allow", "outcome"]


_RECORDING = base64.b64encode(_wav(30)).decode()  # 30 s of 16 kHz speech: 1.28 MB of base64


@pytest.mark.parametrize(
    "part",
    [
        {"type": "input_audio", "input_audio": {"data": _RECORDING, "format": "wav"}},
        {"type": "audio", "base64": _RECORDING, "mime_type": "audio/wav"},
        {"type": "audio", "source_type": "base64", "data": _RECORDING, "mime_type": "audio/wav"},
        {
            "type": "file",
            "file": {"filename": "a.pdf", "file_data": "data:application/pdf;base64," + "A" * 1_300_000},
        },
    ],
    ids=["openai-audio", "langchain-audio", "langchain-audio-v0", "openai-file"],
)
def test_a_model_call_reserves_a_recording_or_a_file_at_its_estimate_not_its_datas_length(
    crew_small: Crew, part: dict[str, Any]
) -> None:
    """Review R53: audio and file parts were counted by their characters (a 30 s recording, some
    320,000 tokens of a 6,000 budget: refused). They count as the dispatcher estimates them
    (``dispatch.prefix.media_part_tokens``: audio by its duration, 751 tokens here; a file at
    ``FILE_TOKENS``): the call runs."""
    agent = create_gated_agent(crew_small.gate, name="boss", model=ScriptedChatModel(turns=[]))
    look = {"role": "user", "content": [{"type": "text", "text": "what is this?"}, part]}
    ended = agent.invoke({"messages": [look]}, context=crew_small.boss)
    assert "budget" not in str(ended["messages"][-1].content)
    assert [e.kind for e in crew_small.entries() if e.resource == "model:scripted"] == ["allow", "outcome"]


def test_the_text_beside_an_image_is_still_counted(crew_small: Crew) -> None:
    """Review R52's image estimate leaves the other parts of a message counted by their characters."""
    agent = create_gated_agent(crew_small.gate, name="boss", model=ScriptedChatModel(turns=[]))
    image = {"type": "image_url", "image_url": {"url": "https://example.org/cat.png"}}
    look = {"role": "user", "content": [{"type": "text", "text": "describe " * 5000}, image]}
    ended = agent.invoke({"messages": [look]}, context=crew_small.boss)
    assert "budget" in str(ended["messages"][-1].content)
    assert [e.kind for e in crew_small.entries() if e.resource == "model:scripted"] == ["deny"]
