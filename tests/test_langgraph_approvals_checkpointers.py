"""The LangGraph integration's approvals under real checkpointers: a call refused
with an approval in hand leaves no request pending, and the examples resume every interrupt a
model's turn can raise (several gated calls at once, more in later turns)."""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from _raw_sqlite import opened
from langchain_core.messages import AIMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command
from test_langgraph import Team, _calls, _entries, _tool_messages, _tools
from test_langgraph import _publisher as _gated_publisher
from test_langgraph import team as team  # the fixture

from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
GO = {"messages": [{"role": "user", "content": "go"}]}


def _publisher(team: Team) -> Any:
    model = ScriptedChatModel(turns=[_calls(("publish", {"path": "reports/a"}))])
    return create_gated_agent(
        team.gate,
        name="supervisor",
        model=model,
        tools=_tools(team),
        checkpointer=InMemorySaver(),
        gate_models=False,
    )


def _requests(team: Team) -> dict[str, str]:
    return {str(r[0]): str(r[1]) for r in team.gate.store.query("SELECT id, state FROM approvals")}


def _every_request_answered(team: Team) -> bool:
    """Whether every ``approval_required`` entry of the log is referred to by a later entry."""
    entries = _entries(team.gate)
    asked = {i for i, e in enumerate(entries) if e.kind == "approval_required"}
    return asked <= {e.ref for e in entries}


def test_a_call_refused_with_a_used_approval_leaves_no_request_pending(team: Team) -> None:
    """The same call asked again in a later answer of the thread, resumed with the approval its
    first asking used. (Until review R55 the replay was in another thread, which then shared the
    request; another thread's call is now another call, and an approval of it is not counted
    there: tests/test_langgraph_approvals_and_enforce.py.)"""
    publish = _calls(("publish", {"path": "reports/a"}))
    agent = create_gated_agent(
        team.gate,
        name="supervisor",
        model=ScriptedChatModel(turns=[publish, publish, AIMessage(content="done")]),
        tools=_tools(team),
        checkpointer=InMemorySaver(),
        gate_models=False,
    )
    config = {"configurable": {"thread_id": "a"}}
    (pending,) = agent.invoke(GO, config, context=team.supervisor)["__interrupt__"]
    used = team.gate.approve(pending.value, team.keys["dana"])
    (asked,) = agent.invoke(Command(resume=used), config, context=team.supervisor)["__interrupt__"]
    assert team.ran == ["publish:reports/a"]
    assert asked.value["request"]["id"] != pending.value["request"]["id"]

    done = agent.invoke(Command(resume=used), config, context=team.supervisor)
    refused = _tool_messages(done)[-1]
    assert refused.status == "error" and "already used" in str(refused.content)
    assert team.ran == ["publish:reports/a"]
    # The request the later answer asked for is closed, not left for an approver to answer in vain.
    assert _requests(team)[asked.value["request"]["id"]] == "denied"
    assert "pending" not in _requests(team).values() and _every_request_answered(team)


def test_a_request_denied_while_the_run_waits_leaves_no_new_request_pending(team: Team) -> None:
    agent = _publisher(team)
    config = {"configurable": {"thread_id": "denied"}}
    (pending,) = agent.invoke(GO, config, context=team.supervisor)["__interrupt__"]
    approval = team.gate.approve(pending.value, team.keys["dana"])
    team.gate.approvals.deny(pending.value["request"]["id"], "dana")  # e.g. `agentgate approval deny`

    done = agent.invoke(Command(resume=approval), config, context=team.supervisor)
    (refused,) = _tool_messages(done)
    assert refused.status == "error" and "denied" in str(refused.content) and team.ran == []
    # The resumed node opened a new request before reading the approval: closed as well.
    assert set(_requests(team).values()) == {"denied"} and _every_request_answered(team)


@pytest.fixture
def examples(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """The examples importable as modules, run in ``tmp_path``; unloaded afterwards."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.chdir(tmp_path)
    yield
    for name in ("support_agent", "research_team", "_common"):
        sys.modules.pop(name, None)


def _example(name: str) -> ModuleType:
    sys.modules.pop(name, None)
    return importlib.import_module(name)


def _refund(order_id: str, amount: int) -> tuple[str, dict[str, Any]]:
    return ("payments.refund", {"order_id": order_id, "amount": amount, "currency": "EUR"})


@pytest.mark.usefixtures("examples")
@pytest.mark.parametrize("parallel", [True, False], ids=["in-one-turn", "in-two-turns"])
def test_the_support_example_resumes_every_gated_refund_a_model_asks_for(
    parallel: bool, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # What a real model may do (docs/quickstart.md runs the examples against one): two refunds
    # above the gate's 500 at once (two interrupts: a plain resume raised LangGraph's
    # RuntimeError), or one per turn (the second left the run paused, reported as finished).
    example = _example("support_agent")
    calls = [_refund("O-77", 800), _refund("O-78", 900)]
    script = [example.calls(*calls)] if parallel else [example.calls(c) for c in calls]
    monkeypatch.setattr(example, "SCRIPT", script)
    example.main()
    out = capsys.readouterr().out
    assert "refunded 800.0 EUR on O-77" in out and "refunded 900.0 EUR on O-78" in out
    assert out.count("approved by alice") == 2 and "VERIFIES" in out


@pytest.mark.usefixtures("examples")
def test_the_research_example_resumes_two_publishes_asked_at_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    example = _example("research_team")
    scripted = example.chat_model

    def two_publishes(turns: list[AIMessage], **kwargs: Any) -> Any:
        def widened(turn: AIMessage) -> AIMessage:
            if any(c["name"] == "docs.publish" for c in turn.tool_calls):
                extra = ("docs.publish", {"path": "reports/final/appendix.md"})
                return example.calls(*[(c["name"], c["args"]) for c in turn.tool_calls], extra)
            return turn

        return scripted([widened(t) for t in turns], **kwargs)

    monkeypatch.setattr(example, "chat_model", two_publishes)
    asyncio.run(example.main())
    out = capsys.readouterr().out
    assert out.count("approved by dana") == 2 and "VERIFIES" in out


def test_a_resume_after_a_restart_leaves_no_request_waiting_for_votes(team: Team) -> None:
    # After a restart the resumed node asks Gate.authorize without the approval first, and the
    # new Gate (its in-process _open_requests is empty) opens a SECOND request for the same call;
    # the approval then consumes the first. The second stays pending: `agentgate approval list`
    # shows a call that already ran as "waiting for votes", and the approval_given entry refers
    # (ref) to the second request's approval_required entry while naming the first request.
    db = team.path / "checkpoints.sqlite"
    config = {"configurable": {"thread_id": "restart"}}
    with opened(db, check_same_thread=False) as conn:
        paused = _gated_publisher(team.gate, SqliteSaver(conn), team).invoke(
            {"messages": [{"role": "user", "content": "go"}]}, config, context=team.supervisor
        )
    payload = paused["__interrupt__"][0].value
    gate = team.reopen()
    with opened(db, check_same_thread=False) as conn:
        agent = _gated_publisher(gate, SqliteSaver(conn), team)
        agent.invoke(
            Command(resume=gate.approve(payload, team.keys["dana"])), config, context=team.supervisor
        )
    assert team.ran == ["publish:reports/final"]
    assert gate.approvals.open_records() == []
    asked = [e.index for e in _entries(gate) if e.kind == "approval_required"]
    given = [e for e in _entries(gate) if e.kind == "approval_given"]
    assert asked == [asked[0]] and [e.ref for e in given] == [asked[0]]
