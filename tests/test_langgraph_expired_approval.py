"""A run resumed with an approval whose request expired is asked for again under the
request its node opened on resuming, instead of refused with that new request left pending.

The resumed node decides first without the approval (LangGraph runs it again), which finds the
old request expired and opens a new one; refusing the old approval then left the new request
pending: listed to approvers, never answered in the audit log."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from test_langgraph import NAMES, Team, _calls, _entries, _policy_text, _tools

from agentgate.capabilities import Call
from agentgate.gate import Approval, Gate
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

EXPIRY_S = 2
GO = {"messages": [{"role": "user", "content": "go"}]}
CONFIG = {"configurable": {"thread_id": "expired"}}


@pytest.fixture
def short_approvals(tmp_path: Path) -> Iterator[Team]:
    """The team of tests/test_langgraph.py, its publish approvals expiring after ``EXPIRY_S``."""
    keys = {name: SigningKey.generate() for name in NAMES}
    text = _policy_text({n: k.did for n, k in keys.items()}, 1_000_000)
    assert "expiry_s: 600" in text
    text = text.replace("expiry_s: 600", f"expiry_s: {EXPIRY_S}")
    gate = Gate(parse_policy(text, source="team.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    supervisor = gate.issue(keys["root"], name="supervisor", key=keys["supervisor"], role="supervisor")
    team = Team(gate, keys, supervisor, tmp_path, [])
    yield team
    team.gate.close()


def _approved_too_late(
    team: Team, monkeypatch: pytest.MonkeyPatch
) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """A publishing supervisor paused for dana's approval, the request's payload, and dana's
    approval of it, which comes back only after the request has expired: the clock is moved
    past it (``time.time``), never waited for (until review R82 a sleep of ``EXPIRY_S`` and a
    fifth, which a request's expiry, its asking's second rounded up, can outlast)."""
    agent = create_gated_agent(
        team.gate,
        name="supervisor",
        model=ScriptedChatModel(turns=[_calls(("publish", {"path": "reports/q"}))]),
        tools=_tools(team),
        checkpointer=InMemorySaver(),
        gate_models=False,
    )
    first = agent.invoke(GO, CONFIG, context=team.supervisor)["__interrupt__"][0].value
    late = team.gate.approve(first, team.keys["dana"])
    wall = time.time
    monkeypatch.setattr(time, "time", lambda: wall() + EXPIRY_S + 1)
    return agent, first, late


def test_an_expired_approval_is_asked_for_again_and_no_request_is_left_pending(
    short_approvals: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    team = short_approvals
    agent, first, late = _approved_too_late(team, monkeypatch)

    again = agent.invoke(Command(resume=late), CONFIG, context=team.supervisor)
    second = again["__interrupt__"][0].value  # asked again, not refused
    assert second["request"]["id"] != first["request"]["id"] and team.ran == []
    publish = [e for e in _entries(team.gate) if e.resource == "tool:publish"]
    # The new request closes the expired one, its entry answered (a ``deny`` referring to it):
    # until review R96's regression review it stayed pending for good.
    assert [e.kind for e in publish] == ["approval_required", "approval_required", "deny"]
    assert publish[2].ref == publish[0].index

    done = agent.invoke(
        Command(resume=team.gate.approve(second, team.keys["dana"])), CONFIG, context=team.supervisor
    )
    assert "__interrupt__" not in done and team.ran == ["publish:reports/q"]
    publish = [e for e in _entries(team.gate) if e.resource == "tool:publish"]
    assert [e.kind for e in publish] == [
        "approval_required",
        "approval_required",
        "deny",
        "approval_given",
        "allow",
        "outcome",
    ]
    open_requests = team.gate.store.query("SELECT id FROM approvals WHERE state = 'pending'")
    assert [tuple(r) for r in open_requests] == []  # the expired one closed as superseded


def test_an_expired_approval_sent_alone_is_still_refused_as_not_usable(
    short_approvals: Team, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no newer request for the call (the gateway's case), nothing changes: a deny."""
    team = short_approvals
    _, _, late = _approved_too_late(team, monkeypatch)
    call = Call.tool("publish", {"path": "reports/q"})
    auth = team.gate.authorize(
        team.supervisor, call, agent="supervisor", call_id="publish-0", approval=Approval.parse(late)
    )
    assert not auth.allowed and not auth.needs_approval
    assert any("approval not usable" in r for r in auth.reasons)
