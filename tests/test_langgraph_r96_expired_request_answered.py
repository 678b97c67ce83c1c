"""An approval request that expired with the grant chain it was asked under is still answered in
the log (review R96's regression review): a supervisor whose own grant expires while the run is
paused is refused ``grant_expired``, and that refusal closes the call's request (denied) with a
``deny`` entry referring to its ``approval_required`` entry, as before requests were capped at
their chain's expiry; a sub-agent's call asked for again under a fresh delegated grant closes the
request on the expired grant as superseded, answered alike; and ``Gate.approve`` of such a request
says that the call needs a new grant, not that invoking the run again asks for it anew."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from test_langgraph import NAMES, Team, _calls, _entries, _make_team, _policy_text, _tool_messages, _tools
from test_langgraph_r96_sub_agent_grant_expiry import resumed_past_the_delegated_grant

from agentgate.errors import InputError
from agentgate.gate import Gate
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

GO = {"messages": [{"role": "user", "content": "go"}]}


def _short_lived_team(tmp_path: Path, expiry_s: int = 600) -> Team:
    """A team whose supervisor's own grant lasts 60 s, less than the approval gate's ``expiry_s``
    (600 s) unless it is given shorter."""
    keys = {name: SigningKey.generate() for name in NAMES}
    text = _policy_text({n: k.did for n, k in keys.items()}, 1_000_000, "usd_micros")
    assert "ttl_s: 3600" in text and "expiry_s: 600" in text
    text = text.replace("ttl_s: 3600", "ttl_s: 60", 1).replace("expiry_s: 600", f"expiry_s: {expiry_s}")
    policy = parse_policy(text, source="team.yaml")
    gate = Gate(policy, SQLiteStore(tmp_path / "agentgate.db"))
    supervisor = gate.issue(keys["root"], name="supervisor", key=keys["supervisor"], role="supervisor")
    return Team(gate, keys, supervisor, tmp_path, [])


def _paused_publish(team: Team) -> tuple[Any, dict[str, Any], Any]:
    """The supervisor's publish, paused for an approval: its agent, the run's config and the
    interrupt."""
    model = ScriptedChatModel(turns=[_calls(("publish", {"path": "reports/x"}))])
    agent = create_gated_agent(
        team.gate, name="supervisor", model=model, tools=_tools(team), checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": "t"}}
    (paused,) = agent.invoke(GO, config, context=team.supervisor)["__interrupt__"]
    return agent, config, paused


def _rows(team: Team) -> list[tuple[object, ...]]:
    with team.gate.store.transaction(immediate=False) as tx:
        return [tuple(r) for r in tx.execute("SELECT id, state, approver FROM approvals ORDER BY created")]


def test_the_supervisors_own_expired_grant_closes_its_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    team = _short_lived_team(tmp_path)
    agent, config, paused = _paused_publish(team)
    request = paused.value["request"]
    assert request["expires_at"] == team.supervisor.chain.expires  # capped at the grant's expiry
    approval = team.gate.approve(paused.value, team.keys["dana"])
    wall = time.time
    monkeypatch.setattr(time, "time", lambda: wall() + 120)  # the grant expired while paused

    with pytest.raises(InputError, match="only under a new grant") as refused:
        team.gate.approve(paused.value, team.keys["dana"])
    assert "invoke the run again without a resume value, with its config and context (graph" not in str(
        refused.value
    )

    result = agent.invoke(Command(resume=approval), config, context=team.supervisor)
    assert "__interrupt__" not in result
    (message,) = _tool_messages(result)
    assert message.status == "error" and "grant_expired" in str(message.content)
    assert team.ran == []
    assert _rows(team) == [(request["id"], "denied", "agentgate:refused")]
    entries = _entries(team.gate)
    (asked,) = [e.index for e in entries if e.kind == "approval_required"]
    (deny,) = [e for e in entries if e.kind == "deny"]
    assert deny.ref == asked
    # Closed by the refusal, not declined by anyone (the regression review of these fixes).
    with pytest.raises(InputError, match="was closed when its call was refused"):
        team.gate.approve(paused.value, team.keys["dana"])
    team.gate.close()


def test_a_request_expired_before_its_grant_says_a_new_grant_is_needed_once_the_grant_expired(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The request's own expiry_s (30 s) ended first, then the grant (60 s): invoking the run again
    is refused ``grant_expired`` and asks for nothing, so the message says a new grant is needed."""
    team = _short_lived_team(tmp_path, expiry_s=30)
    _, _, paused = _paused_publish(team)
    assert paused.value["request"]["expires_at"] < team.supervisor.chain.expires
    wall = time.time
    monkeypatch.setattr(time, "time", lambda: wall() + 45)  # the request expired, the grant lives
    with pytest.raises(InputError, match="invoke the run again without a resume value"):
        team.gate.approve(paused.value, team.keys["dana"])
    monkeypatch.setattr(time, "time", lambda: wall() + 120)  # and now the grant too
    with pytest.raises(InputError, match="only under a new grant"):
        team.gate.approve(paused.value, team.keys["dana"])
    team.gate.close()


def test_a_sub_agents_request_on_an_expired_grant_is_answered_when_asked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    team = _make_team(tmp_path)
    paused, result = resumed_past_the_delegated_grant(team, monkeypatch, use_async=False)
    old = paused.value["request"]
    (again,) = result["__interrupt__"]
    new = again.value["request"]
    assert _rows(team) == [(old["id"], "denied", "agentgate:superseded"), (new["id"], "pending", None)]
    entries = _entries(team.gate)
    old_asked = next(e.index for e in entries if e.kind == "approval_required" and e.ref is None)
    (deny,) = [e for e in entries if e.kind == "deny"]
    assert deny.ref == old_asked
    assert "expired before" in deny.reasons[0] and new["id"] in deny.reasons[0]
    team.gate.close()
