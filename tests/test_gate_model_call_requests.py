"""Model calls at the Gate: an approval request shows the ``max_tokens`` asked for, only
agentgate's own settings are kept in clear, and a budget refusal counts what calls in flight hold."""

from __future__ import annotations

from pathlib import Path

from langgraph.types import Command
from test_langgraph import NAMES, Team, _entries, _policy_text
from test_langgraph_approvals_and_enforce import GO, _runner, _searching_supervisor
from test_langgraph_approvals_and_enforce import gated_model as gated_model  # the fixture

from agentgate.capabilities import Call
from agentgate.gate import Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore


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
    auth = team.gate.authorize(team.supervisor, call, tokens=(10, 50))
    team.gate.abandon(auth)
    team.gate.flush()
    (entry, *_) = [e for e in _entries(team.gate) if e.resource == "model:scripted"]
    assert entry.args == {"max_tokens": 50, "priority": "batch"}
    assert "a secret" not in str(entry.reasons)


def test_a_budget_refusal_counts_what_calls_in_flight_hold(tmp_path: Path) -> None:
    # Under ainvoke a budget refusal said "2 of 3 calls spent": the third call, in flight, held the
    # budget's last unit, and the message did not say so (an operator read it as a wrong refusal).
    keys = {name: SigningKey.generate() for name in NAMES}
    policy = parse_policy(_policy_text({n: k.did for n, k in keys.items()}, 3, "calls"), source="t.yaml")
    gate = Gate(policy, SQLiteStore(tmp_path / "agentgate.db"))
    try:
        supervisor = gate.issue(keys["root"], name="supervisor", key=keys["supervisor"], role="supervisor")
        search = Call.tool("search", {"query": "q"})
        done = gate.authorize(supervisor, search)
        gate.run(done, lambda: "ok")
        held = [gate.authorize(supervisor, search) for _ in range(2)]
        refused = gate.authorize(supervisor, search)
        assert refused.budget_exhausted
        assert "1 of 3 calls spent and 2 held by calls in flight on grant" in refused.reasons[0]
        for auth in held:
            gate.abandon(auth)
    finally:
        gate.close()
