"""Resuming an approval interrupt with a value that is not an approval refuses the call (the
documented way to say no is ``Command(resume="deny")``). The refusal said only "the answer to the
request was not an approval": an approval mangled on its way (a field lost, a signature that is
not hex, a field that is not text) was refused without a word of what was wrong with it. The
refusal now names it. ``Command(resume=None)`` still fails inside LangGraph itself, before any
node runs: the request stays open, and the run resumes with a real approval after."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from test_langgraph import Team, _entries, _publisher
from test_langgraph import team as team  # the fixture

GO = {"messages": [{"role": "user", "content": "go"}]}


def _declined(team: Team, value: object) -> str:
    """The reason of the ``deny`` entry the resume ``value`` makes; the request is closed."""
    agent = _publisher(team.gate, InMemorySaver(), team)
    config: Any = {"configurable": {"thread_id": "t"}}
    agent.invoke(GO, config, context=team.supervisor)
    agent.invoke(Command(resume=value), config, context=team.supervisor)
    assert team.ran == []
    (deny,) = [e for e in _entries(team.gate) if e.resource == "tool:publish" and e.kind == "deny"]
    assert team.gate.store.query("SELECT id FROM approvals WHERE state = 'pending'") == []
    return str(deny.reasons[-1])


def test_a_refusal_by_text_says_the_answer_was_text(team: Team) -> None:
    """Review R67: the documented "deny" is refused, saying what the answer was."""
    assert _declined(team, "deny") == (
        "approval declined: the answer to the request was not an approval: text, not an Approval or its to_dict()"
    )


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (5, "an int, not an Approval or its to_dict()"),
        ({"request": "x"}, "a mapping without 'call_hash', 'approver', 'signature'"),
        (
            {"request": 1, "call_hash": "h", "approver": "a", "signature": "00"},
            "a mapping whose 'request' is not text",
        ),
        (
            {"request": "r", "call_hash": "h", "approver": "a", "signature": "not hex"},
            "a mapping whose 'signature' is not hex",
        ),
        (
            {"request": "r\ud800", "call_hash": "h", "approver": "a", "signature": "00"},
            "a mapping holding text that is not valid Unicode",
        ),
    ],
)
def test_a_mangled_approval_is_refused_saying_what_is_wrong_with_it(
    team: Team, value: object, said: str
) -> None:
    """Review R67: the refusal said "the answer to the request was not an approval" whatever was
    wrong with the value (a field lost on its way, a signature that is not hex)."""
    assert _declined(team, value) == (
        f"approval declined: the answer to the request was not an approval: {said}"
    )


def test_resume_none_fails_in_langgraph_and_the_request_stays_open_for_an_approval(team: Team) -> None:
    """Review R67: ``Command(resume=None)`` fails inside LangGraph 1.2 (``UnboundLocalError``)
    before agentgate runs: nothing is decided or recorded, and the same run then resumes with a
    real approval and runs the call once."""
    agent = _publisher(team.gate, InMemorySaver(), team)
    config: Any = {"configurable": {"thread_id": "t"}}
    paused = agent.invoke(GO, config, context=team.supervisor)
    with pytest.raises(UnboundLocalError):
        agent.invoke(Command(resume=None), config, context=team.supervisor)
    assert [e.kind for e in _entries(team.gate) if e.resource == "tool:publish"] == ["approval_required"]
    approval = team.gate.approve(paused["__interrupt__"][0].value, team.keys["dana"])
    agent.invoke(Command(resume=approval), config, context=team.supervisor)
    assert team.ran == ["publish:reports/final"]
