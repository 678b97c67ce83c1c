"""The lead's fixes of session seventeen.

- An agent behind an approval gate built without a checkpointer: the run used to end with
  ``__interrupt__`` and an open request that no approval could ever answer (LangGraph refuses
  ``Command(resume=...)`` without a checkpointer), listed to approvers until it expired. The
  middleware now sees that the run keeps no checkpoints, closes the request as declined and tells
  the model why; a sub-agent without one of its own runs under its supervisor's and still pauses.
- ``ApprovalRequired`` (a ``Denied``) is raised by ``Gate.run`` for an authorization that waits for
  an approval; ``ReplayDetected``, never raised, is removed from the exception tree.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from test_langgraph import Team, _ask_researcher, _calls, _entries, _make_team, _tools

from agentgate.errors import Denied
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent

INPUT = {"messages": [{"role": "user", "content": "go"}]}


@pytest.fixture
def team(tmp_path: Path) -> Iterator[Team]:
    made = _make_team(tmp_path)
    yield made
    made.gate.close()


def _publisher(team: Team, checkpointer: Any = None, *, enforce: bool = False) -> Any:
    model = ScriptedChatModel(turns=[_calls(("publish", {"path": "reports/final"}))])
    return create_gated_agent(
        team.gate,
        name="supervisor",
        model=model,
        tools=_tools(team),
        checkpointer=checkpointer,
        gate_models=False,
        enforce=enforce,
    )


def test_an_approval_gate_without_a_checkpointer_refuses_and_closes_the_request(team: Team) -> None:
    result = _publisher(team).invoke(INPUT, context=team.supervisor)
    assert "__interrupt__" not in result
    (refused,) = [m for m in result["messages"] if isinstance(m, ToolMessage)]
    assert refused.status == "error" and "without a checkpointer" in str(refused.content)
    assert team.ran == []
    # Nothing is left for approvers to answer, and the log says how the request ended.
    assert team.gate.approvals.open_records() == []
    kinds = [(e.kind, e.resource) for e in _entries(team.gate) if e.resource == "tool:publish"]
    assert kinds == [("approval_required", "tool:publish"), ("deny", "tool:publish")]
    deny = next(e for e in _entries(team.gate) if e.kind == "deny")
    assert any("without a checkpointer" in r for r in deny.reasons)
    assert team.gate.verify().first_bad_index is None


def test_with_enforce_the_refusal_is_raised(team: Team) -> None:
    with pytest.raises(Denied, match="without a checkpointer"):
        _publisher(team, enforce=True).invoke(INPUT, context=team.supervisor)
    assert team.ran == [] and team.gate.approvals.open_records() == []


def test_with_a_checkpointer_the_run_still_pauses(team: Team) -> None:
    agent = _publisher(team, InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    paused = agent.invoke(INPUT, config, context=team.supervisor)
    (pending,) = paused["__interrupt__"]
    done = agent.invoke(
        Command(resume=team.gate.approve(pending.value, team.keys["dana"])), config, context=team.supervisor
    )
    assert "__interrupt__" not in done and team.ran == ["publish:reports/final"]


def test_a_sub_agent_without_its_own_checkpointer_pauses_under_its_supervisors(team: Team) -> None:
    # The sub-agent (built by delegation_tool without a checkpointer) runs inside the supervisor's
    # run, whose checkpointer LangGraph lends it: its approval request pauses the whole run.
    ask = _ask_researcher(team, capabilities=["tool:search", "tool:publish?path^=reports/", "model:scripted"])
    model = ScriptedChatModel(turns=[_calls(("ask_researcher", {"task": "find and publish"}))])
    supervisor = create_gated_agent(
        team.gate, name="supervisor", model=model, tools=[ask], checkpointer=InMemorySaver()
    )
    paused = supervisor.invoke(INPUT, {"configurable": {"thread_id": "n"}}, context=team.supervisor)
    assert paused["__interrupt__"][0].value["request"]["requester"] == "researcher"
    # ... and the same supervisor without a checkpointer: the sub-agent's call is refused at once.
    bare = create_gated_agent(
        team.gate,
        name="supervisor",
        model=ScriptedChatModel(turns=[_calls(("ask_researcher", {"task": "find and publish"}))]),
        tools=[ask],
    )
    result = bare.invoke(INPUT, context=team.supervisor)
    assert "__interrupt__" not in result
    denied = [e for e in _entries(team.gate) if e.kind == "deny" and e.resource == "tool:publish"]
    assert [e.principal for e in denied] == [team.keys["researcher"].did]
    assert any("without a checkpointer" in r for r in denied[0].reasons)
    assert len(team.gate.approvals.open_records()) == 1  # the first run's, still waiting


# --- ApprovalRequired: raised by Gate.run for an authorization that waits for an approval -----
# It and ReplayDetected were in the exception tree and never raised. A replay is a decision's
# refusal (a finding), never an exception, so ReplayDetected is gone; ApprovalRequired is now a
# Denied that says the call waits for an approval.


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


# --- the PostgreSQL pool's size and wait, from the environment ------------------------------
# A gateway serving many calls in parallel could not have more than 8 connections, nor a wait
# other than 10 s, short of building its PostgresStore in Python (`agentgate serve` and the CLI
# open the store from AGENTGATE_STORE).


@pytest.mark.postgres
def test_the_pool_takes_its_size_and_wait_from_the_environment(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentgate.store import open_store

    monkeypatch.setenv("AGENTGATE_PG_POOL_SIZE", "20")
    monkeypatch.setenv("AGENTGATE_PG_POOL_TIMEOUT", "2.5")
    with open_store(postgres_url) as store:
        assert (store.pool.max_size, store.pool.timeout) == (20, 2.5)  # type: ignore[attr-defined]
    monkeypatch.delenv("AGENTGATE_PG_POOL_SIZE")
    monkeypatch.delenv("AGENTGATE_PG_POOL_TIMEOUT")
    with open_store(postgres_url) as store:
        assert (store.pool.max_size, store.pool.timeout) == (8, 10.0)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("AGENTGATE_PG_POOL_SIZE", "0", "from 1 to 1000 connections, got 0"),
        ("AGENTGATE_PG_POOL_SIZE", "eight", "whole number of connections, got 'eight'"),
        ("AGENTGATE_PG_POOL_SIZE", "1001", "from 1 to 1000"),
        ("AGENTGATE_PG_POOL_TIMEOUT", "0", "more than 0 and at most 3600 seconds, got 0.0"),
        ("AGENTGATE_PG_POOL_TIMEOUT", "nan", "more than 0"),
        ("AGENTGATE_PG_POOL_TIMEOUT", "inf", "more than 0"),
        ("AGENTGATE_PG_POOL_TIMEOUT", "10s", "a number of seconds, got '10s'"),
    ],
)
def test_a_pool_setting_out_of_range_is_one_line_naming_the_variable_before_any_connection(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str, value: str, message: str
) -> None:
    from agentgate.cli.main import main
    from agentgate.errors import InputError
    from agentgate.store import open_store

    monkeypatch.setenv(name, value)
    # No server listens there: the setting is refused before anything tries to connect.
    url = "postgresql://nobody@/agentgate?host=/nonexistent-socket-dir&port=1"
    with pytest.raises(InputError, match=f"{name} must be .*{message}"):
        open_store(url)
    assert main(["audit", "verify", "--store", url]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and name in err and "Traceback" not in err
