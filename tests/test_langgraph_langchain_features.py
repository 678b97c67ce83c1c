"""Agentgate's LangGraph integration composed with LangChain's own features (langchain
1.5, langgraph 1.2): its built-in middlewares stacked with ``GateMiddleware``, tool features
(artifacts, injected arguments, ``Command`` results, ``ToolException``, async-only tools,
defaults) and ``create_agent(response_format=...)``. Real agents, a real SQLite store, real
``InMemorySaver`` checkpointers; the model is ``ScriptedChatModel``.

Fixed by the lead in agentgate/integrations/langgraph/ (were strict xfails):

- A tool argument LangGraph injects (``InjectedState``, ``InjectedStore``, ``ToolRuntime``,
  ``InjectedToolCallId``) is decided on as the model sent it: a model that writes a value for it
  got the call decided (and audited) on that value, while ``ToolNode`` strips it and the tool
  runs with the injected one (a policy constraint on the argument allowed ``acme-1``, the tool
  paid from ``evil-corp``). Injected keys are now left out of the call decided. ``test_an_injected_argument_forged_by_the_model_is_not_what_is_decided``.
- A call whose tool answers with a ``Command`` was not kept for ``_answer_again`` (now it is): in a hand-built
  graph's tools node re-run on resume (another call of the node waited for an approval), the
  call that ran is answered "refused: already ran", its ``Command`` update lost.
  ``test_a_command_answer_of_a_call_that_ran_is_answered_again_on_resume``.
- ``ContextEditingMiddleware`` (installed outside the gate, as the docs say) clears old tool
  results in the model request, the refusal's artifact included: the stop mark of a refusal that
  ends the run (a revoked grant) was gone, and with ``gate_models=False`` the model was asked
  again and again. The gate now reads the mark in the run's state. ``test_a_context_edit_does_not_hide_a_refusal_that_ends_the_run``.

What holds:

- ``HumanInTheLoopMiddleware`` outside the gate, ``batched`` and ``per_call``: both interrupt
  sources (the human review, then agentgate's approval) are resumed in turn; a reviewer's edit is
  what the gate decides, asks approval for and runs, once; the model's original arguments are
  never decided. (Installed inside the gate, an edit runs under the decision on the original
  arguments: the documented limit of a middleware inside the gate, not re-tested here.)
- ``ModelRetryMiddleware``: every attempt is decided; a failed attempt is an ``error`` outcome
  naming only the exception type, its reservation released; only the answered call is charged.
- ``ToolCallLimitMiddleware`` (``continue``): a call it blocks is neither decided nor run.
- ``TodoListMiddleware``'s ``write_todos`` (a middleware's own tool) is decided like any tool:
  one the policy does not name is refused as an error message and the run goes on.
- ``response_format=ToolStrategy(...)``: the structured-output tool call is not a tool that runs
  and is not decided; a real call in the same answer is decided and run once.
- Injected values (state, tool call id, runtime) never enter the decision or the audit log.
- ``content_and_artifact`` keeps its artifact; a constrained argument left to its default is
  refused (the decision is on the arguments sent, and a missing one fails closed); an async-only
  tool under ``invoke`` and a tool whose ``ToolException`` is handled by ``handle_tool_error``
  are ``error`` outcomes whose text stays out of the audit log; a tool whose name differs from
  its function's is decided under its tool name.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import (
    ClearToolUsesEdit,
    ContextEditingMiddleware,
    HumanInTheLoopMiddleware,
    ModelRetryMiddleware,
    TodoListMiddleware,
    ToolCallLimitMiddleware,
)
from langchain.agents.structured_output import ToolStrategy
from langchain.tools import ToolRuntime
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, StructuredTool, ToolException
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import InjectedState
from langgraph.types import Command
from pydantic import BaseModel

from agentgate.gate import AgentIdentity, Gate
from agentgate.integrations.langgraph import (
    GateMiddleware,
    ScriptedChatModel,
    create_gated_agent,
    gated_tool_node,
)
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

GO = {"messages": [{"role": "user", "content": "go"}]}


def _policy(d: dict[str, str]) -> str:
    return f"""
version: 1
trust_anchors:
  root: {{did: "{d["root"]}"}}
tenants:
  lab: {{}}
principals:
  supervisor: {{kind: agent, did: "{d["supervisor"]}", tenant: lab, roles: [supervisor]}}
  dana: {{kind: human, did: "{d["dana"]}", tenant: lab, roles: [owner]}}
tools:
  search:
    args: {{query: {{type: string, required: true}}}}
    idempotent: true
    loggable: [query]
  note:
    args: {{text: {{type: string, required: true}}}}
    loggable: [text]
  publish:
    args: {{path: {{type: string, required: true}}}}
    loggable: [path]
  fetch:
    args: {{url: {{type: string, required: true}}, limit: {{type: integer}}}}
    idempotent: true
    loggable: [url, limit]
  pay:
    args: {{amount: {{type: integer, required: true}}, account: {{type: string}}}}
    loggable: [amount, account]
models:
  scripted: {{cost_per_mtok: {{input: 1000000, output: 1000000}}}}
roles:
  supervisor:
    kind: agent
    capabilities:
      - resource: tool:search
      - resource: tool:note
      - resource: tool:publish
      - resource: tool:fetch
        constraints: {{limit: {{le: 100}}}}
      - resource: tool:pay
        constraints: {{account: {{prefix: "acme-"}}}}
      - resource: model:scripted
    budget: {{limit: 1000000, unit: usd_micros}}
    ttl_s: 3600
  owner:
    kind: human
    capabilities:
      - resource: tool:publish
    ttl_s: 3600
approvals:
  publish:
    resource: tool:publish
    approvers: [dana]
    expiry_s: 600
"""


class Rig:
    def __init__(self, path: Path) -> None:
        self.keys = {n: SigningKey.generate() for n in ("root", "supervisor", "dana")}
        policy = parse_policy(_policy({n: k.did for n, k in self.keys.items()}), source="r42.yaml")
        self.gate = Gate(policy, SQLiteStore(path / "agentgate.db"))
        self.me = self.gate.issue(
            self.keys["root"], name="supervisor", key=self.keys["supervisor"], role="supervisor"
        )
        self.ran: list[str] = []

    def entries(self) -> list[Any]:
        self.gate.flush()
        return list(self.gate.audit.entries())

    def of(self, resource: str) -> list[tuple[str, Any]]:
        """(kind, args or status) of each entry on ``resource``."""
        return [
            (e.kind, e.status if e.kind == "outcome" else e.args)
            for e in self.entries()
            if e.resource == resource
        ]

    def held(self) -> list[Any]:
        self.gate.flush()
        return list(self.gate.store.query("SELECT id FROM budget_reservations WHERE state = 'reserved'"))


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    made = Rig(tmp_path)
    yield made
    made.gate.close()


def _calls(*calls: tuple[str, dict[str, Any]]) -> AIMessage:
    return AIMessage(
        content="", tool_calls=[{"name": n, "args": a, "id": f"{n}-{i}"} for i, (n, a) in enumerate(calls)]
    )


def _tool(func: Any, name: str | None = None, **kwargs: Any) -> StructuredTool:
    return StructuredTool.from_function(func=func, name=name or func.__name__, description="d", **kwargs)


def _answers(result: dict[str, Any]) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in result["messages"] if isinstance(m, ToolMessage)}


def _run(agent: Any, mode: str, *args: Any, **kwargs: Any) -> Any:
    return asyncio.run(agent.ainvoke(*args, **kwargs)) if mode == "async" else agent.invoke(*args, **kwargs)


# --- injected arguments -------------------------------------------------------------------------


def test_an_injected_argument_forged_by_the_model_is_not_what_is_decided(rig: Rig) -> None:
    # The tool's ``account`` comes from the graph state; the model cannot see it in the schema but
    # can write it anyway. The gate allowed ``account=acme-1`` (the policy's prefix) and recorded
    # it; ToolNode then replaced it with the state's ``evil-corp``, and the tool paid from there.
    def pay(amount: int, account: Annotated[str, InjectedState("account")]) -> str:
        rig.ran.append(f"pay:{amount}:{account}")
        return "paid"

    class State(MessagesState):
        account: str

    graph = StateGraph(State)
    graph.add_node("tools", gated_tool_node(rig.gate, [_tool(pay)], agent="supervisor"))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    app = graph.compile()
    forged = _calls(("pay", {"amount": 5, "account": "acme-1"}))
    app.invoke({"messages": [forged], "account": "evil-corp"}, context=rig.me)
    decided = [args for kind, args in rig.of("tool:pay") if kind == "allow"]
    assert "pay:5:evil-corp" not in rig.ran
    assert all(args.get("account") != "acme-1" for args in decided)


def test_injected_values_never_reach_the_decision_or_the_audit_log(rig: Rig) -> None:
    seen: list[Any] = []

    def search(
        query: str,
        state: Annotated[dict[str, Any], InjectedState],
        call_id: Annotated[str, InjectedToolCallId],
        runtime: ToolRuntime[Any, Any],
    ) -> str:
        seen.append((len(state["messages"]), call_id, runtime.tool_call_id))
        return "ok"

    model = ScriptedChatModel(turns=[_calls(("search", {"query": "q"}))])
    agent = create_gated_agent(rig.gate, name="supervisor", model=model, tools=[_tool(search)])
    agent.invoke({"messages": [{"role": "user", "content": "SECRET-IN-STATE"}]}, context=rig.me)
    assert seen == [(2, "search-0", "search-0")]
    assert rig.of("tool:search") == [("allow", {"query": "q"}), ("outcome", "ok")]
    assert "SECRET-IN-STATE" not in repr(rig.entries())


# --- Command answers ----------------------------------------------------------------------------


@pytest.mark.parametrize("as_list", [False, True], ids=["command", "list"])
def test_a_command_answer_of_a_call_that_ran_is_answered_again_on_resume(rig: Rig, as_list: bool) -> None:
    # A hand-built graph's tools node: ``note`` (not idempotent) answers with a Command and ran;
    # ``publish`` in the same node waited for an approval. On the resume LangGraph re-runs the
    # node: ``note`` is refused as already run (right: it must not run twice), but its answer is
    # not kept as a plain ToolMessage answer is, so the model is told it was refused and the
    # Command's state update is lost. (Sync only: under ``ainvoke`` the node's calls race, and
    # ``note`` may be given up before it starts, then run on the resume, which is right; when it
    # finished first, the same happens as here.)
    # Review R51 (``list``): ``note`` answering with a list (a ``Command`` and a ``ToolMessage``,
    # which ``ToolNode`` passes on as the call's result) was not kept either.
    def note(text: str, runtime: ToolRuntime[Any, Any]) -> Any:
        rig.ran.append(f"note:{text}")
        reply = ToolMessage(content=f"noted {text}", tool_call_id=runtime.tool_call_id or "", name="note")
        if as_list:
            return [Command(update={"messages": [HumanMessage(content=f"remember {text}")]}), reply]
        return Command(update={"messages": [reply]})

    def publish(path: str) -> str:
        rig.ran.append(f"publish:{path}")
        return "published"

    graph = StateGraph(MessagesState)
    graph.add_node("tools", gated_tool_node(rig.gate, [_tool(note), _tool(publish)], agent="supervisor"))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    app = graph.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    ask = _calls(("note", {"text": "x"}), ("publish", {"path": "reports/a"}))
    paused = app.invoke({"messages": [ask]}, config, context=rig.me)
    assert rig.ran == ["note:x"]
    approval = rig.gate.approve(paused["__interrupt__"][0].value, rig.keys["dana"])
    done = app.invoke(Command(resume=approval), config, context=rig.me)
    assert sorted(rig.ran) == ["note:x", "publish:reports/a"]
    answers = _answers(done)
    assert answers["publish-1"].status == "success"
    assert answers["note-0"].status == "success" and answers["note-0"].content == "noted x"
    remembered = [m.content for m in done["messages"] if isinstance(m, HumanMessage)]
    assert remembered == (["remember x"] if as_list else [])


# --- built-in middlewares ------------------------------------------------------------------------


@pytest.mark.parametrize("interrupt_mode", ["batched", "per_call"])
def test_a_reviewers_edit_is_what_is_approved_and_run_once(rig: Rig, interrupt_mode: str) -> None:
    def publish(path: str) -> str:
        rig.ran.append(f"publish:{path}")
        return "published"

    def note(text: str) -> str:
        rig.ran.append(f"note:{text}")
        return "noted"

    model = ScriptedChatModel(turns=[_calls(("publish", {"path": "reports/a"}), ("note", {"text": "n"}))])
    review = HumanInTheLoopMiddleware(interrupt_on={"publish": True}, interrupt_mode=interrupt_mode)
    agent = create_gated_agent(
        rig.gate,
        name="supervisor",
        model=model,
        tools=[_tool(publish), _tool(note)],
        gate_models=False,
        checkpointer=InMemorySaver(),
        middleware=[review],
    )
    config = {"configurable": {"thread_id": "t"}}
    edit = {"type": "edit", "edited_action": {"name": "publish", "args": {"path": "reports/edited"}}}
    out = agent.invoke(GO, config, context=rig.me)
    sources = []
    for _ in range(4):
        if not out.get("__interrupt__"):
            break
        answers: dict[str, Any] = {}
        for pending in out["__interrupt__"]:
            if isinstance(pending.value, dict) and "request" in pending.value:
                sources.append("agentgate")
                assert pending.value["request"]["args"] == {"path": "reports/edited"}
                answers[pending.id] = rig.gate.approve(pending.value, rig.keys["dana"])
            else:
                sources.append("review")
                answers[pending.id] = {"decisions": [edit]} if interrupt_mode == "batched" else edit
        out = agent.invoke(Command(resume=answers), config, context=rig.me)
    assert sources == ["review", "agentgate"]
    assert sorted(rig.ran) == ["note:n", "publish:reports/edited"]
    assert {m.status for m in _answers(out).values()} == {"success"}
    decided = rig.of("tool:publish")
    assert [k for k, _ in decided] == ["approval_required", "approval_given", "allow", "outcome"]
    assert all(args == {"path": "reports/edited"} for kind, args in decided if kind != "outcome")
    assert rig.of("tool:note") == [("allow", {"text": "n"}), ("outcome", "ok")]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_each_model_retry_is_decided_and_a_failed_one_released(rig: Rig, mode: str) -> None:
    class Flaky(ScriptedChatModel):
        fails: int = 2

        def _generate(self, *args: Any, **kwargs: Any) -> Any:
            if self.fails > 0:
                self.fails -= 1
                raise ConnectionError("backend down, password hunter2")
            return super()._generate(*args, **kwargs)

        async def _agenerate(self, *args: Any, **kwargs: Any) -> Any:
            return self._generate(*args, **kwargs)

    agent = create_gated_agent(
        rig.gate,
        name="supervisor",
        model=Flaky(turns=[]),
        middleware=[ModelRetryMiddleware(max_retries=3, initial_delay=0.0, jitter=False)],
    )
    result = _run(agent, mode, GO, context=rig.me)
    assert result["messages"][-1].content == "Done."
    decided = rig.of("model:scripted")
    assert [k for k, _ in decided] == ["allow", "outcome"] * 3
    assert [s for k, s in decided if k == "outcome"] == ["error", "error", "ok"]
    outcomes = [e for e in rig.entries() if e.kind == "outcome"]
    assert [e.reasons for e in outcomes[:2]] == [("ConnectionError",)] * 2
    assert "hunter2" not in repr(rig.entries())
    assert rig.held() == []
    states = dict(rig.gate.store.query("SELECT state, count(*) FROM budget_reservations GROUP BY state"))
    assert states == {"committed": 1, "released": 2}


def test_a_call_the_tool_call_limit_blocks_is_neither_decided_nor_run(rig: Rig) -> None:
    def note(text: str) -> str:
        rig.ran.append(f"note:{text}")
        return "noted"

    model = ScriptedChatModel(turns=[_calls(("note", {"text": "a"}), ("note", {"text": "b"}))])
    agent = create_gated_agent(
        rig.gate,
        name="supervisor",
        model=model,
        tools=[_tool(note)],
        gate_models=False,
        middleware=[ToolCallLimitMiddleware(run_limit=1, exit_behavior="continue")],
    )
    result = agent.invoke(GO, context=rig.me)
    assert rig.ran == ["note:a"]
    assert rig.of("tool:note") == [("allow", {"text": "a"}), ("outcome", "ok")]
    assert _answers(result)["note-1"].status == "error"


def test_a_middlewares_own_tool_is_decided_like_any_tool(rig: Rig) -> None:
    model = ScriptedChatModel(
        turns=[_calls(("write_todos", {"todos": [{"content": "x", "status": "pending"}]})), _calls()]
    )
    agent = create_gated_agent(
        rig.gate, name="supervisor", model=model, gate_models=False, middleware=[TodoListMiddleware()]
    )
    result = agent.invoke(GO, context=rig.me)
    refused = _answers(result)["write_todos-0"]
    assert refused.status == "error" and "tool:write_todos" in str(refused.content)
    assert not result.get("todos")
    assert [e.kind for e in rig.entries() if e.resource == "tool:write_todos"] == ["deny"]
    assert isinstance(result["messages"][-1], AIMessage)


def test_a_context_edit_does_not_hide_a_refusal_that_ends_the_run(rig: Rig) -> None:
    def search(query: str) -> str:
        rig.ran.append(query)
        return "ok"

    model = ScriptedChatModel(turns=[_calls(("search", {"query": f"q{i}"})) for i in range(6)])
    agent = create_gated_agent(
        rig.gate,
        name="supervisor",
        model=model,
        tools=[_tool(search)],
        gate_models=False,
        middleware=[ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=0, keep=0)])],
    )
    rig.gate.revoke(rig.me)
    result = agent.invoke(GO, context=rig.me)
    assert rig.ran == []
    # Without the context edit: one refusal, and the run ends on it at the model's next turn.
    assert [k for k, _ in rig.of("tool:search")] == ["deny"]
    assert "revoked" in str(result["messages"][-1].content)


# --- structured output and tool features ----------------------------------------------------


class Answer(BaseModel):
    text: str


@pytest.mark.parametrize("same_answer", [True, False])
def test_structured_output_is_not_a_gated_tool_and_a_real_call_beside_it_runs_once(
    rig: Rig, same_answer: bool
) -> None:
    def note(text: str) -> str:
        rig.ran.append(f"note:{text}")
        return "noted"

    asks = [("note", {"text": "a"}), ("Answer", {"text": "hi"})]
    turns = [_calls(*asks)] if same_answer else [_calls(asks[0]), _calls(asks[1])]
    agent = create_agent(
        ScriptedChatModel(turns=turns),
        [_tool(note)],
        response_format=ToolStrategy(Answer),
        context_schema=AgentIdentity,
        middleware=[GateMiddleware(rig.gate, agent="supervisor")],
    )
    result = agent.invoke(GO, context=rig.me)
    assert result["structured_response"] == Answer(text="hi")
    assert rig.ran == ["note:a"]
    assert rig.of("tool:note") == [("allow", {"text": "a"}), ("outcome", "ok")]
    assert not any(e.resource == "tool:Answer" for e in rig.entries())


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_tool_features_are_decided_on_the_args_sent_and_audited_by_their_outcome(rig: Rig, mode: str) -> None:
    def search(query: str) -> tuple[str, dict[str, Any]]:
        rig.ran.append(f"search:{query}")
        return f"results for {query}", {"raw": [1, 2]}

    async def fetch(url: str, limit: int = 1000) -> str:
        rig.ran.append(f"fetch:{url}:{limit}")
        return "fetched"

    def note(text: str) -> str:
        rig.ran.append(f"note:{text}")
        raise ToolException("disk full, token hunter2")

    def do_publish(path: str) -> str:  # a tool named otherwise than its function
        rig.ran.append(f"publish:{path}")
        return "published"

    tools = [
        _tool(search, response_format="content_and_artifact"),
        StructuredTool.from_function(coroutine=fetch, name="fetch", description="d"),
        _tool(note, handle_tool_error=True),
        _tool(do_publish, name="publish"),
    ]
    model = ScriptedChatModel(
        turns=[
            _calls(
                ("search", {"query": "q"}),
                ("fetch", {"url": "u"}),  # its limit left to the default, 1000 > 100
                ("fetch", {"url": "u", "limit": 50}),
                ("note", {"text": "t"}),
                ("publish", {"path": "reports/x"}),
            )
        ]
    )
    agent = create_gated_agent(
        rig.gate,
        name="supervisor",
        model=model,
        tools=tools,
        gate_models=False,
        checkpointer=InMemorySaver(),
    )
    result = _run(agent, mode, GO, {"configurable": {"thread_id": mode}}, context=rig.me)
    answers = _answers(result)
    assert answers["search-0"].status == "success" and answers["search-0"].artifact == {"raw": [1, 2]}
    # Under invoke the async-only fetch cannot run: refused before it is decided (review R54).
    refusal = "only an async implementation" if mode == "sync" else "limit"
    assert answers["fetch-1"].status == "error" and refusal in str(answers["fetch-1"].content)
    assert answers["note-3"].status == "error"
    # The publish waits for its approval under its tool name (the function's is do_publish).
    (pending,) = result["__interrupt__"]
    assert pending.value["request"]["resource"] == "tool:publish"
    fetched = [s for k, s in rig.of("tool:fetch") if k == "outcome"]
    if mode == "sync":  # an async-only tool under invoke: refused before it is decided, not run (review R54)
        assert answers["fetch-2"].status == "error" and fetched == []
        assert "only an async implementation" in str(answers["fetch-2"].content)
        assert "fetch:u:50" not in rig.ran
    else:
        assert answers["fetch-2"].status == "success" and fetched == ["ok"]
        assert "fetch:u:50" in rig.ran
    assert not any(r.startswith("fetch:u:1000") or r.startswith("publish") for r in rig.ran)
    assert [s for k, s in rig.of("tool:search") if k == "outcome"] == ["ok"]
    assert [s for k, s in rig.of("tool:note") if k == "outcome"] == ["error"]
    assert "hunter2" not in repr(rig.entries())
