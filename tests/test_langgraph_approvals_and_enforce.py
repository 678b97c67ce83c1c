"""The LangGraph integration: each test is a defect found by running real agents
(langgraph 1.2, langchain 1.5) against docs/langgraph.md."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from test_langgraph import NAMES, Team, _ask_researcher, _calls, _entries, _policy_text, _tools
from test_langgraph import team as team  # the fixture
from test_langgraph_resume_after_policy_change import PUBLISHER, Rig, begin, finished, paused, sign
from test_langgraph_resume_after_policy_change import policy as team_policy

from agentgate.capabilities import Call
from agentgate.errors import Denied
from agentgate.gate import Approval, Gate
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

GO = {"messages": [{"role": "user", "content": "go"}]}

LONG_ANSWERS = """  long-answers:
    resource: model:scripted
    when: {max_tokens: {gt: 100}}
    approvers: [dana]
"""
"""An approval gate on model calls, as docs/gateway.md ("Calls behind an approval gate") shows one."""


@pytest.fixture
def gated_model(tmp_path: Path) -> Iterator[Team]:
    """The team of tests/test_langgraph.py, its policy holding ``LONG_ANSWERS`` too."""
    keys = {name: SigningKey.generate() for name in NAMES}
    text = _policy_text({n: k.did for n, k in keys.items()}, 1_000_000) + LONG_ANSWERS
    gate = Gate(parse_policy(text, source="team.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    supervisor = gate.issue(keys["root"], name="supervisor", key=keys["supervisor"], role="supervisor")
    team = Team(gate, keys, supervisor, tmp_path, [])
    yield team
    gate.close()


def _runner(agent: Any, team: Team, mode: str) -> Callable[[Any], Awaitable[dict[str, Any]]]:
    config = {"configurable": {"thread_id": mode}}
    if mode == "ainvoke":
        return lambda value: agent.ainvoke(value, config, context=team.supervisor)
    return lambda value: asyncio.to_thread(agent.invoke, value, config, context=team.supervisor)


def _searching_supervisor(team: Team) -> Any:
    """The supervisor, with a checkpointer, whose model asks for one search."""
    return create_gated_agent(
        team.gate,
        name="supervisor",
        model=ScriptedChatModel(turns=[_calls(("search", {"query": "q"}))]),
        tools=_tools(team),
        checkpointer=InMemorySaver(),
    )


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
async def test_a_model_call_behind_an_approval_gate_pauses_for_the_approval_and_then_runs(
    gated_model: Team, mode: str
) -> None:
    # The middleware ended the run at once ("needs a human approval that was not given") without
    # calling interrupt(), and left the request it had opened pending: no resume could ever
    # approve the call, although the policy's gate, the Gate and the gateway all allow it.
    team = gated_model
    agent = _searching_supervisor(team)
    run = _runner(agent, team, mode)

    paused = await run(GO)
    (pending,) = paused["__interrupt__"]
    assert pending.value["request"]["resource"] == "model:scripted" and team.ran == []

    # The requester's own approval is asked for again, as for a tool call (signed with
    # Approval.sign: Gate.approve refuses the requester's key since review R71).
    again = await run(Command(resume=Approval.sign(pending.value, team.keys["supervisor"]).to_dict()))
    (pending,) = again["__interrupt__"]
    assert team.ran == []

    resumed = await run(Command(resume=team.gate.approve(pending.value, team.keys["dana"])))
    assert team.ran == ["search:q"]
    # The next model call is over the gate's limit too: a new request, asked for again.
    assert resumed["__interrupt__"][0].value["request"]["id"] != pending.value["request"]["id"]
    model_entries = [e for e in _entries(team.gate) if e.resource == "model:scripted"]
    # The requester's own approval is in the log too, referring to the request, each time the
    # run presented it (a resume replays it before the next answer).
    refused = [e for e in model_entries if e.kind == "approval_required" and e.ref is not None]
    assert len(refused) == 2 and all(e.ref == model_entries[0].index for e in refused)
    assert all("approval not counted: the approver must not be the requester" in e.reasons for e in refused)
    model_entries = [e for e in model_entries if e not in refused]
    assert [e.kind for e in model_entries][:4] == ["approval_required", "approval_given", "allow", "outcome"]
    assert model_entries[2].approver == team.keys["dana"].did


async def test_a_model_call_whose_approval_is_refused_ends_the_run_and_closes_the_request(
    gated_model: Team,
) -> None:
    team = gated_model
    agent = _searching_supervisor(team)
    run = _runner(agent, team, "ainvoke")
    await run(GO)
    done = await run(Command(resume="deny"))
    assert "__interrupt__" not in done and team.ran == []
    assert "approval declined" in str(done["messages"][-1].content)
    kinds = [e.kind for e in _entries(team.gate) if e.resource == "model:scripted"]
    assert kinds == ["approval_required", "deny"]


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
async def test_with_enforce_a_refused_delegation_raises_denied(team: Team, mode: str) -> None:
    # GateMiddleware's enforce=True "raises Denied instead of telling the model"; a delegation the
    # policy refuses (here: it would hand on tool:shell) was still told to the model as a tool
    # error, and the run went on.
    ask = _ask_researcher(team, capabilities=["tool:search", "tool:shell"])
    model = ScriptedChatModel(turns=[_calls(("ask_researcher", {"task": "find papers"}))])
    supervisor = create_gated_agent(team.gate, name="supervisor", model=model, tools=[ask], enforce=True)
    with pytest.raises(Denied, match="hand on tool:shell"):
        await _runner(supervisor, team, mode)(GO)
    assert team.ran == [] and team.gate.delegations == []


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
async def test_with_enforce_a_delegation_on_an_inherited_identity_raises_denied(
    team: Team, mode: str
) -> None:
    middle = create_gated_agent(
        team.gate,
        name="middle",
        model=ScriptedChatModel(turns=[_calls(("ask_researcher", {"task": "x"}))]),
        tools=[_ask_researcher(team)],
        enforce=True,
        gate_models=False,
    )
    with pytest.raises(Denied, match="implicit_trust_inheritance"):
        await _runner(middle, team, mode)(GO)
    assert team.ran == [] and team.gate.delegations == []


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
async def test_with_enforce_a_tool_whose_name_no_rule_can_name_raises_denied(team: Team, mode: str) -> None:
    def shout(text: str) -> str:
        team.ran.append(text)
        return text

    tool = StructuredTool.from_function(func=shout, name="Shout Loud", description="shout")
    agent = create_gated_agent(
        team.gate,
        name="supervisor",
        model=ScriptedChatModel(turns=[_calls(("Shout Loud", {"text": "hi"}))]),
        tools=[tool],
        enforce=True,
        gate_models=False,
    )
    with pytest.raises(Denied, match="not canonical"):
        await _runner(agent, team, mode)(GO)
    assert team.ran == []


def test_authorize_records_a_refusal_for_arguments_that_are_not_valid_unicode_behind_an_approval_gate(
    team: Team,
) -> None:
    # Without an approval gate such a call is a recorded deny; behind one, _approval_request's
    # argument_digest raises InputError out of authorize (its docstring: never raises for a
    # refused call), and nothing is recorded.
    call = Call.tool("publish", {"path": "reports/\ud83d"})
    auth = team.gate.authorize(team.supervisor, call, agent="supervisor", call_id="c1")
    assert not auth.allowed
    assert [e.kind for e in _entries(team.gate) if e.resource == "tool:publish"] == ["deny"]


def test_running_a_call_that_waits_for_an_approval_raises_approval_required(team: Team) -> None:
    from agentgate.capabilities import Call
    from agentgate.errors import ApprovalRequired

    auth = team.gate.authorize(team.supervisor, Call.tool("publish", {"path": "reports/x"}), call_id="c1")
    assert auth.needs_approval
    with pytest.raises(ApprovalRequired, match="approval required from dana") as raised:
        team.gate.run(auth, lambda: team.ran.append("ran"))
    assert isinstance(raised.value, Denied) and raised.value.decision is auth.decision
    assert team.ran == []
    refused = team.gate.authorize(team.supervisor, Call.tool("shell", {"cmd": "ls"}), call_id="c2")
    with pytest.raises(Denied) as plain:
        team.gate.run(refused, lambda: team.ran.append("ran"))
    assert type(plain.value) is Denied and team.ran == []


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
async def test_a_resume_value_nested_past_the_recursion_limit_refuses_the_call(team: Team, mode: str) -> None:
    # Review R52: a resume value nested ten thousand levels deep reached ``Approval.parse``, whose
    # ``str()`` of it raised ``RecursionError``: the node failed, nothing was recorded, the request
    # stayed pending. It is no approval: the call is refused and the request closed. (LangGraph's
    # checkpointer then fails to store such a value, and says so when the run ends.)
    model = ScriptedChatModel(turns=[_calls(("publish", {"path": "reports/q"}))])
    agent = create_gated_agent(
        team.gate,
        name="supervisor",
        model=model,
        tools=_tools(team),
        checkpointer=InMemorySaver(),
        gate_models=False,
    )
    run = _runner(agent, team, mode)
    assert (await run(GO))["__interrupt__"]
    deep: dict[str, Any] = {}
    for _ in range(10_000):
        deep = {"request": deep}
    with pytest.raises(Exception) as failed:
        await run(Command(resume=deep))
    assert not isinstance(failed.value, RecursionError), failed.value
    assert team.ran == []
    kinds = [e.kind for e in _entries(team.gate) if e.resource == "tool:publish"]
    assert kinds == ["approval_required", "deny"]
    assert team.gate.approvals.open_records() == []


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_two_threads_asking_the_same_call_are_approved_apart(tmp_path: Path, mode: str) -> None:
    """Review R55: two threads whose model asked the same call (same tool call id, arguments and
    grant) shared one approval request, its call hash naming no thread: thread B resumed with the
    approval signed for thread A's interrupt ran the call, and A's resume was then refused as
    already used. Each thread now has its own request; A's approval is not counted in B (asked
    again), and runs the call in A."""
    rig = Rig(tmp_path, "sqlite", mode)
    try:
        identity = begin(rig, team_policy())
        asked_a = paused(rig.run(rig.agent(PUBLISHER), GO, identity, thread="A"))
        asked_b = paused(rig.run(rig.agent(PUBLISHER), GO, identity, thread="B"))
        assert asked_a["request"]["id"] != asked_b["request"]["id"]

        again = paused(
            rig.run(rig.agent(PUBLISHER), Command(resume=sign(asked_a, "dana")), identity, thread="B")
        )
        assert again["request"]["id"] == asked_b["request"]["id"] and rig.ran == []

        finished(rig.run(rig.agent(PUBLISHER), Command(resume=sign(asked_a, "dana")), identity, thread="A"))
        assert rig.ran == ["publish:reports/final"]
        finished(rig.run(rig.agent(PUBLISHER), Command(resume=sign(asked_b, "dana")), identity, thread="B"))
        assert rig.ran == ["publish:reports/final"] * 2
    finally:
        rig.close()
