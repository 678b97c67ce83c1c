"""LangGraph state forgery, time travel and advanced graph features against
the agentgate middleware, with the real langgraph 1.2 / langchain 1.5 packages, real SQLite stores
and LangGraph's own checkpointers (``InMemorySaver``), scripted chat models.

What holds:

- A tool call injected with ``graph.update_state`` (an ``AIMessage`` the model never wrote) is
  decided like any other: a call no rule names is refused and recorded, a call behind an approval
  gate is asked for, and an approval given earlier for the same tool call id and arguments (used)
  does not carry over to it.
- Editing an interrupted call's arguments with ``update_state`` before the resume: the resumed
  call is asked for again under its new arguments, the approval signed for the old ones does not
  apply, and only the edited call runs, once, when its own approval comes.
- Time travel: resuming an older checkpoint (``Command(resume=...)`` with its ``checkpoint_id``)
  after the approved call ran refuses it (the call-once store: same task); replaying it
  (``invoke(None, older_config)``, a fork with a new task) asks again, and the used approval is
  refused as already used (or, in the process where it ran, answered with what it returned),
  leaving no request pending. One approval runs one of two forks.
  A grant revoked stays revoked in a fork of a checkpoint taken before the revocation, and a
  budget spent is never refunded by going back (every run of a replay is decided and charged).
- Parallel approvals of one model turn (``create_agent``'s one task per tool call): approvals
  swapped between the two interrupts are asked for again and run nothing; a resume that answers
  one of two runs that one and keeps the other waiting.
- ``Send`` fan-out to a ``gated_tool_node``: every branch is decided, swapped approvals run
  nothing, each call runs once. A ``create_agent`` graph used as a subgraph node: its approval
  pauses the parent and resumes through it, the call runs once. The functional API:
  ``gated_tool_node`` called inside an ``@task`` of an ``@entrypoint`` decides every call and asks
  for approvals through ``interrupt()`` (``GateMiddleware`` itself needs ``create_agent``; the
  functional API is not mentioned in docs/langgraph.md).
- ``durability="exit"``, ``"async"`` and ``"sync"``, ``invoke`` and ``ainvoke``: the approval
  flow pauses and resumes, the call runs once, a second resume with the same approval runs
  nothing.
- A run stopped by the recursion limit (``GraphRecursionError``) leaves no budget reservation
  held, sync and async, and its audit log verifies.

Fixed by the lead (were strict xfails):

- Replaying a checkpoint taken before a non-idempotent tool ran (``invoke(None, config)`` of
  the checkpoint whose next node is ``tools``, or a fork by ``update_state`` with the same
  ``AIMessage``) ran the same tool call again: LangGraph gives the fork a new task id, and the
  call-once key was scoped by ``checkpoint_ns``. It is now scoped by the asking answer's id.
- In a hand-built graph whose ``gated_tool_node`` runs all calls of a model turn in one task, a
  sibling's approval interrupt makes LangGraph re-run the whole node on resume: a non-idempotent
  call that already ran was answered as refused ("already ran to completion"), its result lost;
  under ``ainvoke`` it was refused as started, its outcome not yet recorded (LangGraph's async
  node leaves it running). The middleware now waits for a call of its own still running, and
  answers a call that ran to completion in this process with the answer it returned (the
  refusal is recorded all the same); after a restart the refusal stands.

Fixed by the lead in review R42 (was a strict xfail):

- A request opened for a call whose arguments were then edited with ``update_state`` stayed
  pending (listed by ``agentgate approval list``) until it expired, although no run will make
  that call again. It is now closed (denied by ``agentgate:superseded``, with a ``deny`` entry
  referring to its ``approval_required`` entry) when the edited call is asked for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.errors import GraphRecursionError
from langgraph.func import entrypoint, task
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Command, Send

from agentgate.gate import AgentIdentity, Gate
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent, gated_tool_node
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker]}}
  dana: {{kind: human, did: "{dana}", roles: [owner]}}
tools:
  pay:
    args: {{amount: {{type: integer, required: true}}}}
    loggable: [amount]
  lookup:
    args: {{id: {{type: string, required: true}}}}
    idempotent: true
  publish:
    args: {{path: {{type: string, required: true}}}}
    loggable: [path]
models:
  scripted: {{cost_per_mtok: {{input: 1, output: 1}}}}
roles:
  worker:
    kind: agent
    capabilities:
      - {{resource: tool:pay}}
      - {{resource: tool:lookup}}
      - {{resource: tool:publish, constraints: {{path: {{prefix: "reports/"}}}}}}
      - {{resource: model:scripted}}
    budget: {{limit: {budget}, unit: calls}}
    ttl_s: 3600
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

GO = {"messages": [{"role": "user", "content": "go"}]}


@dataclass
class Rig:
    gate: Gate
    keys: dict[str, SigningKey]
    agent: AgentIdentity
    ran: list[str] = field(default_factory=list)

    def tools(self) -> list[BaseTool]:
        def pay(amount: int) -> str:
            self.ran.append(f"pay:{amount}")
            return f"paid {amount}"

        def lookup(id: str) -> str:
            self.ran.append(f"lookup:{id}")
            return f"found {id}"

        def publish(path: str) -> str:
            self.ran.append(f"publish:{path}")
            return f"published {path}"

        return [
            StructuredTool.from_function(func=f, name=f.__name__, description=f.__name__)
            for f in (pay, lookup, publish)
        ]

    def approve(self, interrupt_value: dict[str, Any]) -> dict[str, Any]:
        return self.gate.approve(interrupt_value, self.keys["dana"])

    def entries(self) -> list[Any]:
        self.gate.flush()
        return list(self.gate.audit.entries())

    def pending_requests(self) -> list[tuple[str]]:
        self.gate.flush()
        return self.gate.store.query("SELECT id FROM approvals WHERE state IN ('pending', 'approved')")

    def spent(self) -> int:
        return self.gate.budget_usage(self.agent)[self.agent.chain.root.id][0]

    def held(self) -> int:
        self.gate.flush()
        ((count,),) = self.gate.store.query(
            "SELECT COUNT(*) FROM budget_reservations WHERE state = 'reserved'"
        )
        return int(count)


def _rig(tmp_path: Path, budget: int = 100) -> Rig:
    keys = {n: SigningKey.generate() for n in ("root", "agent", "dana")}
    text = POLICY.format(root=keys["root"].did, agent=keys["agent"].did, dana=keys["dana"].did, budget=budget)
    gate = Gate(parse_policy(text, source="timetravel.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
    return Rig(gate, keys, agent)


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    made = _rig(tmp_path)
    yield made
    made.gate.close()


def _turn(*calls: tuple[str, dict[str, Any], str]) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": n, "args": a, "id": i} for n, a, i in calls])


def _agent(rig: Rig, *turns: AIMessage, checkpointer: Any = None) -> Any:
    return create_gated_agent(
        rig.gate,
        name="agent",
        model=ScriptedChatModel(turns=list(turns)),
        tools=rig.tools(),
        checkpointer=InMemorySaver() if checkpointer is None else checkpointer,
        gate_models=False,
    )


def _tool_messages(state: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in state["messages"] if isinstance(m, ToolMessage)]


def _thread(name: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": name}}


def _refused_as_spent(message: ToolMessage, ran: str = "published reports/a") -> bool:
    """Not run again: refused because the approval was used or the call already ran, or answered
    with what the call returned when it ran (in the process that ran it, the middleware keeps
    that answer: ``GateMiddleware._answer_again``; the refusal is recorded all the same)."""
    text = str(message.content)
    refused = message.status == "error" and ("already used" in text or "already ran to completion" in text)
    return refused or (message.status == "success" and text == ran)


def _before_tools(graph: Any, config: dict[str, Any]) -> Any:
    """The oldest checkpoint of the thread whose next node is ``tools`` (the model proposed, no
    tool has run yet)."""
    return [s for s in graph.get_state_history(config) if s.next == ("tools",)][-1]


# --- (1) state forgery: update_state --------------------------------------------------------


def test_an_injected_tool_call_is_decided_and_a_used_approval_does_not_carry_over(rig: Rig) -> None:
    graph = _agent(rig, _turn(("publish", {"path": "reports/a"}, "pub-1")))
    config = _thread("inject")
    paused = graph.invoke(GO, config, context=rig.agent)
    approval = rig.approve(paused["__interrupt__"][0].value)
    graph.invoke(Command(resume=approval), config, context=rig.agent)
    assert rig.ran == ["publish:reports/a"]

    # The model never wrote this turn: the same tool call id and arguments as the approved call,
    # and a publish outside the grant's prefix.
    forged = _turn(("publish", {"path": "reports/a"}, "pub-1"), ("publish", {"path": "etc/passwd"}, "pub-2"))
    graph.update_state(config, {"messages": [forged]}, as_node="model")
    asked = graph.invoke(None, config, context=rig.agent)
    (pending,) = asked["__interrupt__"]  # the injected call is asked for; the out-of-scope one refused
    assert pending.value["request"]["args"] == {"path": "reports/a"}
    assert pending.value["request"]["id"] != paused["__interrupt__"][0].value["request"]["id"]
    done = graph.invoke(Command(resume=approval), config, context=rig.agent)  # the used approval
    assert "__interrupt__" not in done
    by_id = {m.tool_call_id: m for m in _tool_messages(done)}
    assert by_id["pub-2"].status == "error" and "tool:publish" in str(by_id["pub-2"].content)
    assert rig.ran == ["publish:reports/a"]
    assert rig.pending_requests() == []
    denied = [e for e in rig.entries() if e.kind == "deny" and e.resource == "tool:publish"]
    # The out-of-scope call; the call the used approval could not pay for; the request it had open,
    # closed as declined (docs/langgraph.md, Approvals).
    assert len(denied) == 3
    assert any("already used" in " ".join(e.reasons) for e in denied)
    assert any("approval declined" in " ".join(e.reasons) for e in denied)
    assert rig.gate.verify().ok


@pytest.mark.parametrize("edited", ["reports/evil", "secrets/keys"])
def test_editing_an_interrupted_call_before_resume_is_decided_again(rig: Rig, edited: str) -> None:
    graph = _agent(rig, _turn(("publish", {"path": "reports/a"}, "pub-1")))
    config = _thread("edit")
    paused = graph.invoke(GO, config, context=rig.agent)
    approval = rig.approve(paused["__interrupt__"][0].value)
    proposed = [m for m in graph.get_state(config).values["messages"] if isinstance(m, AIMessage)][-1]
    rewritten = AIMessage(
        content="", id=proposed.id, tool_calls=[{"name": "publish", "args": {"path": edited}, "id": "pub-1"}]
    )
    graph.update_state(config, {"messages": [rewritten]}, as_node="model")

    resumed = graph.invoke(Command(resume=approval), config, context=rig.agent)
    assert rig.ran == []  # the approval for reports/a did not run the edited call
    if edited.startswith("reports/"):
        (again,) = resumed["__interrupt__"]
        assert again.value["request"]["args"] == {"path": edited}
        done = graph.invoke(Command(resume=rig.approve(again.value)), config, context=rig.agent)
        assert "__interrupt__" not in done and rig.ran == [f"publish:{edited}"]
    else:  # outside the grant: refused without asking anyone
        assert "__interrupt__" not in resumed
        (refused,) = _tool_messages(resumed)
        assert refused.status == "error" and rig.ran == []
    allowed = [e for e in rig.entries() if e.kind == "allow" and e.resource == "tool:publish"]
    assert len(allowed) == (1 if edited.startswith("reports/") else 0)
    assert rig.gate.verify().ok


def test_the_request_of_an_edited_call_does_not_stay_pending(rig: Rig) -> None:
    graph = _agent(rig, _turn(("publish", {"path": "reports/a"}, "pub-1")))
    config = _thread("edit-orphan")
    paused = graph.invoke(GO, config, context=rig.agent)
    proposed = [m for m in graph.get_state(config).values["messages"] if isinstance(m, AIMessage)][-1]
    rewritten = AIMessage(
        content="",
        id=proposed.id,
        tool_calls=[{"name": "publish", "args": {"path": "reports/b"}, "id": "pub-1"}],
    )
    graph.update_state(config, {"messages": [rewritten]}, as_node="model")
    asked = graph.invoke(
        Command(resume=rig.approve(paused["__interrupt__"][0].value)), config, context=rig.agent
    )
    done = graph.invoke(
        Command(resume=rig.approve(asked["__interrupt__"][0].value)), config, context=rig.agent
    )
    assert "__interrupt__" not in done and rig.ran == ["publish:reports/b"]  # holds
    assert rig.pending_requests() == []  # the request for reports/a was left pending until R42
    entries = rig.entries()
    (closed,) = [e for e in entries if e.kind == "deny" and "superseded" in e.reasons[0]]
    asked = entries[closed.ref or 0]
    assert asked.kind == "approval_required" and asked.args == {"path": "reports/a"}
    assert (closed.resource, closed.args_digest, closed.args) == (
        asked.resource,
        asked.args_digest,
        asked.args,
    )
    assert rig.gate.verify().ok


def test_the_same_call_id_in_another_thread_does_not_close_a_request(rig: Rig) -> None:
    """A scripted model reuses its call ids in every run: a request is closed only by the same
    call of the same run asked for again changed."""
    first = _agent(rig, _turn(("publish", {"path": "reports/a"}, "pub-1")))
    paused = first.invoke(GO, _thread("one"), context=rig.agent)
    second = _agent(rig, _turn(("publish", {"path": "reports/b"}, "pub-1")))
    assert "__interrupt__" in second.invoke(GO, _thread("two"), context=rig.agent)
    assert len(rig.pending_requests()) == 2
    done = first.invoke(
        Command(resume=rig.approve(paused["__interrupt__"][0].value)), _thread("one"), context=rig.agent
    )
    assert "__interrupt__" not in done and rig.ran == ["publish:reports/a"]


# --- (2) time travel ------------------------------------------------------------------------


def test_an_older_checkpoint_resumed_or_replayed_with_a_used_approval_runs_nothing(rig: Rig) -> None:
    graph = _agent(rig, _turn(("publish", {"path": "reports/a"}, "pub-1")))
    config = _thread("travel")
    paused = graph.invoke(GO, config, context=rig.agent)
    at_interrupt = graph.get_state(config).config
    approval = rig.approve(paused["__interrupt__"][0].value)
    graph.invoke(Command(resume=approval), config, context=rig.agent)
    assert rig.ran == ["publish:reports/a"]

    # Resume the interrupted checkpoint again: the same task, refused by the call-once store.
    again = graph.invoke(Command(resume=approval), at_interrupt, context=rig.agent)
    # In this process, with the answer it returned when it ran (the refusal is recorded).
    assert _tool_messages(again)[-1].content == "published reports/a"
    assert "already ran to completion" in rig.entries()[-1].reasons[0]
    # Replay it (a fork: a new task): asked again, and the used approval does not pay for it
    # (or, were forks scoped as the xfail below asks, refused at once as a call that ran).
    replayed = graph.invoke(None, at_interrupt, context=rig.agent)
    if "__interrupt__" in replayed:
        replayed = graph.invoke(Command(resume=approval), config, context=rig.agent)
    assert _refused_as_spent(_tool_messages(replayed)[-1])
    assert rig.ran == ["publish:reports/a"]
    assert rig.pending_requests() == []
    assert rig.gate.verify().ok


def test_one_approval_runs_one_of_two_forks(rig: Rig) -> None:
    graph = _agent(rig, _turn(("publish", {"path": "reports/a"}, "pub-1")))
    config = _thread("forks")
    paused = graph.invoke(GO, config, context=rig.agent)
    original = graph.get_state(config).config
    forked = graph.invoke(None, original, context=rig.agent)  # a fork of the interrupted step
    (fork_pending,) = forked["__interrupt__"]
    # The fork asks under the request still open for the same call: one request, not two.
    assert fork_pending.value["request"]["id"] == paused["__interrupt__"][0].value["request"]["id"]
    approval = rig.approve(fork_pending.value)
    graph.invoke(Command(resume=approval), config, context=rig.agent)  # the fork (the thread's head)
    assert rig.ran == ["publish:reports/a"]
    other = graph.invoke(Command(resume=approval), original, context=rig.agent)  # the original
    assert _refused_as_spent(_tool_messages(other)[-1])
    assert rig.ran == ["publish:reports/a"]
    allowed = [e for e in rig.entries() if e.kind == "allow" and e.resource == "tool:publish"]
    assert len(allowed) == 1


def test_a_revoked_grant_stays_revoked_and_a_spent_budget_is_not_refunded_in_a_fork(rig: Rig) -> None:
    graph = _agent(rig, _turn(("pay", {"amount": 5}, "pay-1")))
    config = _thread("revoked")
    graph.invoke(GO, config, context=rig.agent)
    assert rig.ran == ["pay:5"] and rig.spent() == 1
    before = _before_tools(graph, config)
    rig.gate.revoke(rig.agent, reason="time travel test")
    for travel in (
        lambda: graph.invoke(None, before.config, context=rig.agent),
        lambda: graph.invoke(GO, _thread("revoked-new"), context=rig.agent),
    ):
        result = travel()
        refused = _tool_messages(result)[-1]
        assert refused.status == "error" and "revoked" in str(refused.content)
    assert rig.ran == ["pay:5"] and rig.spent() == 1  # nothing refunded, nothing more spent


def test_a_replayed_call_is_decided_afresh_and_never_refunds_the_budget(rig: Rig) -> None:
    """Whatever the call-once store decides for a replay (see the xfail below), the replayed
    call has a decision of its own on the record and the budget spent never goes down."""
    graph = _agent(rig, _turn(("pay", {"amount": 40}, "pay-1")))
    config = _thread("replay-budget")
    graph.invoke(GO, config, context=rig.agent)
    spent = rig.spent()
    decided = len([e for e in rig.entries() if e.resource == "tool:pay" and e.kind in ("allow", "deny")])
    graph.invoke(None, _before_tools(graph, config).config, context=rig.agent)
    after = [e for e in rig.entries() if e.resource == "tool:pay" and e.kind in ("allow", "deny")]
    assert len(after) == decided + 1
    runs = rig.ran.count("pay:40")
    assert rig.spent() == spent + (runs - 1) >= spent  # charged for every run, refunded for none
    assert rig.held() == 0 and rig.gate.verify().ok


@pytest.mark.parametrize("travel", ["replay", "update_state"])
def test_time_travel_does_not_run_a_non_idempotent_call_twice(rig: Rig, travel: str) -> None:
    graph = _agent(rig, _turn(("pay", {"amount": 40}, "pay-1")))
    config = _thread(f"pay-{travel}")
    graph.invoke(GO, config, context=rig.agent, durability="sync")
    assert rig.ran == ["pay:40"]
    before = _before_tools(graph, config)
    if travel == "replay":
        graph.invoke(None, before.config, context=rig.agent)
    else:  # a fork written by hand: the model's own answer again, as the model node
        proposed = before.values["messages"][-1]
        fork = graph.update_state(before.config, {"messages": [proposed]}, as_node="model")
        graph.invoke(None, fork, context=rig.agent)
    assert rig.ran == ["pay:40"]


# --- (3) parallel interrupts, Send, subgraphs, the functional API ---------------------------


async def test_parallel_approvals_swapped_or_partial_run_only_what_was_approved(rig: Rig) -> None:
    graph = _agent(
        rig, _turn(("publish", {"path": "reports/a"}, "pub-a"), ("publish", {"path": "reports/b"}, "pub-b"))
    )
    config = _thread("parallel")
    paused = await graph.ainvoke(GO, config, context=rig.agent)
    first, second = paused["__interrupt__"]
    swapped = {first.id: rig.approve(second.value), second.id: rig.approve(first.value)}
    still = await graph.ainvoke(Command(resume=swapped), config, context=rig.agent)
    assert len(still["__interrupt__"]) == 2 and rig.ran == []
    one, other = still["__interrupt__"]
    partial = await graph.ainvoke(Command(resume={one.id: rig.approve(one.value)}), config, context=rig.agent)
    assert rig.ran == [f"publish:{one.value['request']['args']['path']}"]
    (left,) = partial["__interrupt__"]
    assert left.value["request"]["id"] == other.value["request"]["id"]
    done = await graph.ainvoke(Command(resume={left.id: rig.approve(left.value)}), config, context=rig.agent)
    assert "__interrupt__" not in done
    assert sorted(rig.ran) == ["publish:reports/a", "publish:reports/b"]
    assert rig.pending_requests() == [] and rig.gate.verify().ok


def test_send_fan_out_to_a_gated_tool_node(rig: Rig) -> None:
    node = gated_tool_node(rig.gate, rig.tools(), agent="agent")

    def fan_out(state: MessagesState) -> list[Send]:
        branches = [
            _turn(("publish", {"path": "reports/0"}, "p0")),
            _turn(("publish", {"path": "reports/1"}, "p1")),
            _turn(("lookup", {"id": "x"}, "l0")),
            _turn(("publish", {"path": "tmp/2"}, "p2")),
        ]
        return [Send("tools", {"messages": [branch]}) for branch in branches]

    builder = StateGraph(MessagesState, context_schema=AgentIdentity)
    builder.add_node("tools", node)
    builder.add_conditional_edges(START, fan_out, ["tools"])
    builder.add_edge("tools", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    config = _thread("send")
    paused = graph.invoke({"messages": []}, config, context=rig.agent)
    first, second = paused["__interrupt__"]
    assert rig.ran == ["lookup:x"]
    swapped = {first.id: rig.approve(second.value), second.id: rig.approve(first.value)}
    still = graph.invoke(Command(resume=swapped), config, context=rig.agent)
    assert len(still["__interrupt__"]) == 2 and rig.ran == ["lookup:x"]
    done = graph.invoke(
        Command(resume={i.id: rig.approve(i.value) for i in still["__interrupt__"]}),
        config,
        context=rig.agent,
    )
    assert "__interrupt__" not in done
    assert sorted(rig.ran) == ["lookup:x", "publish:reports/0", "publish:reports/1"]
    statuses = {m.tool_call_id: m.status for m in _tool_messages(done)}
    assert statuses == {"p0": "success", "p1": "success", "l0": "success", "p2": "error"}
    assert rig.gate.verify().ok


def test_a_gated_agent_as_a_subgraph_node_pauses_and_resumes_through_its_parent(rig: Rig) -> None:
    inner = create_gated_agent(
        rig.gate,
        name="agent",
        model=ScriptedChatModel(
            turns=[_turn(("pay", {"amount": 3}, "pay-1"), ("publish", {"path": "reports/s"}, "pub-1"))]
        ),
        tools=rig.tools(),
        gate_models=False,
    )
    parent = StateGraph(MessagesState, context_schema=AgentIdentity)
    parent.add_node("inner", inner)
    parent.add_edge(START, "inner")
    parent.add_edge("inner", END)
    graph = parent.compile(checkpointer=InMemorySaver())
    config = _thread("subgraph")
    paused = graph.invoke(GO, config, context=rig.agent)
    (pending,) = paused["__interrupt__"]
    assert rig.ran == ["pay:3"]
    approval = rig.approve(pending.value)
    done = graph.invoke(Command(resume=approval), config, context=rig.agent)
    assert "__interrupt__" not in done
    assert rig.ran == ["pay:3", "publish:reports/s"]
    graph.invoke(Command(resume=approval), config, context=rig.agent)  # a stray second resume
    assert rig.ran == ["pay:3", "publish:reports/s"]
    assert {m.tool_call_id: m.status for m in _tool_messages(done)} == {
        "pay-1": "success",
        "pub-1": "success",
    }


def test_the_functional_api_with_a_gated_tool_node_inside_a_task(rig: Rig) -> None:
    node = gated_tool_node(rig.gate, rig.tools(), agent="agent")

    @task
    def run_tools(message: AIMessage) -> dict[str, Any]:
        return node.invoke({"messages": [message]})

    @task
    def run_first(message: AIMessage) -> dict[str, Any]:
        return node.invoke({"messages": [message]})

    @entrypoint(checkpointer=InMemorySaver(), context_schema=AgentIdentity)
    def flow(path: str) -> list[str]:
        paid = run_first(_turn(("pay", {"amount": 7}, "pay-1"))).result()
        published = run_tools(_turn(("publish", {"path": path}, "pub-1"))).result()
        return [str(m.content) for m in [*paid["messages"], *published["messages"]]]

    config = _thread("functional")
    flow.invoke("reports/f", config, context=rig.agent)
    (pending,) = flow.get_state(config).interrupts
    assert pending.value["request"]["args"] == {"path": "reports/f"} and rig.ran == ["pay:7"]
    answers = flow.invoke(Command(resume=rig.approve(pending.value)), config, context=rig.agent)
    # The paying task's result was kept by LangGraph: the payment is neither run nor refused again.
    assert answers == ["paid 7", "published reports/f"]
    assert rig.ran == ["pay:7", "publish:reports/f"]
    refused_without_identity = flow.invoke("reports/g", _thread("functional-nobody"))
    assert refused_without_identity[0].startswith("agentgate refused") and rig.ran == [
        "pay:7",
        "publish:reports/f",
    ]


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
async def test_a_non_idempotent_call_beside_an_approval_in_one_tool_node_keeps_its_result(
    rig: Rig, mode: str
) -> None:
    builder = StateGraph(MessagesState, context_schema=AgentIdentity)
    builder.add_node("tools", gated_tool_node(rig.gate, rig.tools(), agent="agent"))
    builder.add_edge(START, "tools")
    builder.add_edge("tools", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    config = _thread(f"one-node-{mode}")
    turn = _turn(("pay", {"amount": 9}, "pay-1"), ("publish", {"path": "reports/n"}, "pub-1"))

    async def run(value: Any) -> dict[str, Any]:
        if mode == "ainvoke":
            return await graph.ainvoke(value, config, context=rig.agent)
        return graph.invoke(value, config, context=rig.agent)

    paused = await run({"messages": [turn]})
    done = await run(Command(resume=rig.approve(paused["__interrupt__"][0].value)))
    # Each ran once: the payment did not run twice. Their order is not the rule: the two calls run
    # in parallel, and the payment may not have started when the approval paused the node (seen
    # under load on Python 3.12 and 3.13, review R77); it then runs after the resume.
    assert sorted(rig.ran) == ["pay:9", "publish:reports/n"]
    by_id = {m.tool_call_id: m for m in _tool_messages(done)}
    assert by_id["pay-1"].status == "success" and by_id["pay-1"].content == "paid 9", by_id["pay-1"].content


# --- durability modes, recursion limit ------------------------------------------------------


@pytest.mark.parametrize("durability", ["exit", "async", "sync"])
@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
async def test_the_approval_flow_under_each_durability(rig: Rig, durability: str, mode: str) -> None:
    graph = _agent(rig, _turn(("pay", {"amount": 1}, "pay-1"), ("publish", {"path": "reports/d"}, "pub-1")))
    config = _thread(f"durability-{durability}-{mode}")

    async def run(value: Any) -> dict[str, Any]:
        if mode == "ainvoke":
            return await graph.ainvoke(value, config, context=rig.agent, durability=durability)
        return graph.invoke(value, config, context=rig.agent, durability=durability)

    paused = await run(GO)
    approval = rig.approve(paused["__interrupt__"][0].value)
    done = await run(Command(resume=approval))
    assert "__interrupt__" not in done
    await run(Command(resume=approval))  # a second resume of the finished thread
    assert sorted(rig.ran) == ["pay:1", "publish:reports/d"]
    assert {m.tool_call_id: m.status for m in _tool_messages(done)} == {
        "pay-1": "success",
        "pub-1": "success",
    }
    assert rig.held() == 0 and rig.gate.verify().ok


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
async def test_the_recursion_limit_leaves_no_reservation_held(tmp_path: Path, mode: str) -> None:
    rig = _rig(tmp_path, budget=1000)
    try:
        turns = [
            _turn(("lookup", {"id": f"{i}"}, "l"), ("pay", {"amount": i}, f"pay-{i}")) for i in range(50)
        ]
        graph = create_gated_agent(
            rig.gate, name="agent", model=ScriptedChatModel(turns=turns), tools=rig.tools()
        )
        config = {"recursion_limit": 7}
        with pytest.raises(GraphRecursionError):
            if mode == "ainvoke":
                await graph.ainvoke(GO, config, context=rig.agent)
            else:
                graph.invoke(GO, config, context=rig.agent)
        await asyncio.sleep(0)
        assert rig.held() == 0
        assert rig.spent() == len(rig.ran) + len(
            [e for e in rig.entries() if e.kind == "allow" and e.resource == "model:scripted"]
        )
        assert rig.gate.verify().ok
    finally:
        rig.gate.close()


async def test_a_call_still_being_decided_when_its_node_paused_is_waited_for_by_the_resumed_run(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CI (session 17, a loaded machine): the test above failed once under ainvoke. LangGraph's
    async tools node gathers its calls: when ``publish`` paused for its approval, ``pay`` was
    still being decided on a worker thread, and the run ended; its allow was recorded (the call
    started) before it ran, and the run resumed at once decided it in between: refused as
    started with no outcome, the payment's answer lost to the model. The middleware marked a call
    running only from its run on; it marks it from its decision on, so the resumed run waits for
    the whole attempt. Here ``pay``'s decision is held until the resumed run is under way."""
    release, decided = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()
    real = rig.gate.authorize
    held = []

    def authorize(*args: Any, **kwargs: Any) -> Any:
        auth = real(*args, **kwargs)
        if auth.call.resource == "tool:pay" and not held:
            held.append(auth)
            loop.call_soon_threadsafe(decided.set)
            asyncio.run_coroutine_threadsafe(release.wait(), loop).result(timeout=30)
        return auth

    monkeypatch.setattr(rig.gate, "authorize", authorize)
    builder = StateGraph(MessagesState, context_schema=AgentIdentity)
    builder.add_node("tools", gated_tool_node(rig.gate, rig.tools(), agent="agent"))
    builder.add_edge(START, "tools")
    builder.add_edge("tools", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    config = _thread("held-decision")
    turn = _turn(("pay", {"amount": 9}, "pay-1"), ("publish", {"path": "reports/n"}, "pub-1"))

    paused = await graph.ainvoke({"messages": [turn]}, config, context=rig.agent)
    await asyncio.wait_for(decided.wait(), 30)
    assert rig.ran == []  # pay is decided (allowed, started) and has not run yet
    resumed = asyncio.ensure_future(
        graph.ainvoke(
            Command(resume=rig.approve(paused["__interrupt__"][0].value)), config, context=rig.agent
        )
    )
    await asyncio.sleep(0.2)  # the resumed run reaches pay while its first attempt is held
    release.set()
    done = await asyncio.wait_for(resumed, 60)
    assert sorted(rig.ran) == ["pay:9", "publish:reports/n"]  # each once
    by_id = {m.tool_call_id: m for m in _tool_messages(done)}
    assert by_id["pay-1"].status == "success" and by_id["pay-1"].content == "paid 9", by_id["pay-1"].content
