"""Review R36, the lead's part: defects left open by review R35, each pinned by a test that fails
without its fix."""

from __future__ import annotations

from langgraph.types import Command
from test_langgraph import Team, _entries
from test_review_r35_langgraph import GO, _runner, _searching_supervisor
from test_review_r35_langgraph import gated_model as gated_model  # the fixture

from agentgate.capabilities import Call


async def test_a_model_call_approval_request_shows_the_max_tokens_asked_for(gated_model: Team) -> None:
    # The approval request of a model call behind a gate on max_tokens showed "args": {} (a model
    # declares no loggable arguments): the approver saw only a digest of what was asked.
    team = gated_model
    run = _runner(_searching_supervisor(team), team, "ainvoke")
    paused = await run(GO)
    request = paused["__interrupt__"][0].value["request"]
    assert request["resource"] == "model:scripted"
    assert request["args"] == {"max_tokens": 1024}
    await run(Command(resume="deny"))
    (asked, refused) = [e for e in _entries(team.gate) if e.resource == "model:scripted"]
    assert asked.args == refused.args == {"max_tokens": 1024}


def test_a_model_call_keeps_only_agentgates_own_settings_in_clear(gated_model: Team) -> None:
    # Settings agentgate gives a model call are in clear; anything else put in one is dropped.
    team = gated_model
    call = Call.model("scripted", {"max_tokens": 50, "priority": "batch", "prompt": "a secret"})
    auth = team.gate.authorize(team.supervisor, call)
    team.gate.abandon(auth)
    team.gate.flush()
    (entry, *_) = [e for e in _entries(team.gate) if e.resource == "model:scripted"]
    assert entry.args == {"max_tokens": 50, "priority": "batch"}
    assert "a secret" not in str(entry.reasons)
