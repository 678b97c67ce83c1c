"""Names on grants that bind none (review R67): a grant made outside the Gate (``agentgate grant
issue``, ``issue()``) or by ``Gate.issue`` before review R66 carries no agent name, and its holder
names itself (docs/concepts.md, "Agent name").

Two things its holder could do with that name are refused or closed here: present a case or
compatibility variant of another principal's name (``RESEARCHER`` on the supervisor's key),
which the Gate compared exactly at a decision though ``Gate.issue`` and ``Gate.delegate`` fold
it since review R66; and take one ``principal_concurrency`` share per name it gives itself."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from test_langgraph import Team, _make_team
from test_langgraph import team as team  # the fixture

from agentgate.authority import Budget, issue
from agentgate.capabilities import Call
from agentgate.gate import AgentIdentity, Gate
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore
from agentgate.tasks import SchedulerConfig

SEARCH = Call.tool("search", {"query": "q"})
WAIT_S = 10.0


def _outside_grant(team: Team, key: SigningKey) -> Any:
    """The supervisor role's grant to ``key``, made outside the Gate: its purpose binds no name."""
    return issue(
        team.keys["root"],
        key.public,
        ["tool:search"],
        ttl=60,
        budget=Budget(1000, "usd_micros"),
        max_depth=1,
        purpose="role supervisor",
    )


@pytest.mark.parametrize(
    "name", ["Researcher", "RESEARCHER", "\uff52\uff45\uff53\uff45\uff41\uff52\uff43\uff48\uff45\uff52"]
)
def test_a_variant_of_a_principals_name_on_an_unbound_grant_is_refused(team: Team, name: str) -> None:
    """Review R67: the supervisor's key with a grant made outside the Gate was refused under
    ``researcher`` (another principal's name) but decided, and recorded, under ``Researcher``,
    ``RESEARCHER`` or the full-width form: the decision compared names exactly, where
    ``Gate.issue`` and ``Gate.delegate`` compare them folded (NFKC, case folded)."""
    key = team.keys["supervisor"]
    refused = team.gate.authorize(AgentIdentity(name, key, _outside_grant(team, key)), SEARCH)
    assert not refused.allowed
    (finding,) = refused.findings
    assert (finding.kind.value, finding.code) == ("implicit_trust_inheritance", "inherited_identity")
    assert f"agent {name} is running on the key and grant of supervisor" in finding.message
    assert team.keys["researcher"].did in finding.message


def test_an_unbound_grant_on_its_own_key_keeps_any_other_name(team: Team) -> None:
    """The fold refuses only a principal's name on another key: the supervisor's unbound grant
    under ``Supervisor`` (its own name, folded) or a name no principal's folds to is decided."""
    key = team.keys["supervisor"]
    for name in ("Supervisor", "supervisor", "worker-7"):
        assert team.gate.authorize(AgentIdentity(name, key, _outside_grant(team, key)), SEARCH).allowed


def _wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.01)


def test_one_key_takes_one_concurrency_share_under_any_names(tmp_path: Path) -> None:
    """Review R67: ``principal_concurrency`` counted by agent name, and the holder of a grant that
    binds no name chooses its name: one key ran one call under ``worker-a`` and another at once
    under ``worker-b``, each name a share of its own. The limit now counts the holder's key: the
    second waits for the first's slot (the names stay what idempotency keys and dead letters
    record)."""
    team = _make_team(tmp_path)
    team.gate.close()
    gate = Gate(
        team.gate.policy,
        SQLiteStore(tmp_path / "agentgate.db"),
        scheduler=SchedulerConfig(principal_concurrency=1),
    )
    key = team.keys["supervisor"]
    chain = _outside_grant(team, key)
    release = threading.Event()
    ran: list[str] = []

    def held() -> str:
        ran.append("a")
        release.wait(WAIT_S)
        return "a"

    try:
        with ThreadPoolExecutor(2) as pool:
            first_auth = gate.authorize(AgentIdentity("worker-a", key, chain), SEARCH)
            second_auth = gate.authorize(
                AgentIdentity("worker-b", key, chain), Call.tool("search", {"query": "r"})
            )
            assert first_auth.allowed and second_auth.allowed
            first: Future[str] = pool.submit(gate.run, first_auth, held)
            _wait_until(lambda: ran == ["a"])
            second: Future[str] = pool.submit(gate.run, second_auth, lambda: ran.append("b") or "b")
            _wait_until(lambda: gate._limits.queued == 1 or ran == ["a", "b"])
            assert ran == ["a"], "worker-b ran beside worker-a on the same key"
            release.set()
            assert (first.result(WAIT_S), second.result(WAIT_S)) == ("a", "b")
    finally:
        release.set()
        gate.close()
