"""The Gate's outcomes (agentgate/gate/_outcomes.py): each call that ran gets its outcome entry and
its reservation settled, written in the background, kept through a program's end, a dropped
Gate and a store outage, and saying how the call was charged."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from test_audit_reconciliation import _keys, _read
from test_audit_reconciliation import _policy_text as _r27_policy_text
from test_gate_approvals import _agent, _gate, _r23_gate
from test_gate_approvals import r27_gate as r27_gate  # the fixture
from test_gate_policy_change import MODEL

from agentgate.capabilities import Call
from agentgate.dispatch.backends import MAX_USAGE_TOKENS
from agentgate.gate import Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore
from agentgate.store._postgres import PostgresStore


def test_a_program_that_ends_without_gate_close_keeps_its_last_outcomes(tmp_path: Path) -> None:
    # The quickstart (and README's "Using it") never call gate.close(): the outcome of the last
    # call waits up to 20 ms for the daemon thread "agentgate-outcomes", which dies with the
    # interpreter. The outcome entry is lost and its reservation stays held (2 runs in 3 lost it
    # when following docs/quickstart.md literally).
    # Each attempt is a program of its own that ends without gate.close(): one child interpreter
    # imports once, then forks a process per attempt, which builds its Gate, runs the agent and
    # ends as a script does (SystemExit, the interpreter's own finalization, its daemon threads
    # dying with it). The imports, not the race, were what five fresh interpreters repeated.
    script = f"""
import os, sys
sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
from pathlib import Path
from test_langgraph import _make_team, _calls, _tools
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent
for where in sys.argv[1:]:
    sys.stdout.flush(); sys.stderr.flush()
    if os.fork() == 0:
        team = _make_team(Path(where))
        model = ScriptedChatModel(turns=[_calls(("search", {{"query": "x"}}))], final="")
        agent = create_gated_agent(team.gate, name="supervisor", model=model, tools=_tools(team), gate_models=False)
        agent.invoke({{"messages": [("user", "go")]}}, context=team.supervisor)
        sys.exit(0)  # the program's end, as at the end of the quickstart's script
    _, status = os.wait()
    if status != 0:
        sys.exit(f"{{where}}: the program exited with status {{status}}")
"""
    attempts = [tmp_path / str(attempt) for attempt in range(5)]
    for where in attempts:
        where.mkdir()
    subprocess.run([sys.executable, "-c", script, *map(str, attempts)], check=True, timeout=120)
    for attempt, where in enumerate(attempts):
        entries = [
            bytes(row[0]) for row in SQLiteStore(where / "agentgate.db").query("SELECT entry FROM audit_log")
        ]
        assert sum(b'"kind":"outcome"' in entry for entry in entries) == 1, f"attempt {attempt}: outcome lost"


def _threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("agentgate-")}


def test_a_gate_dropped_without_close_leaves_no_thread_behind(tmp_path: Path) -> None:
    """The outcome writer thread (agentgate-outcomes) holds the Gate strongly (its commit and tick
    are the Gate's bound methods), so a Gate dropped without close() is never collected: its two
    threads, its SQLite connections (about 7 descriptors) and everything it holds stay for the
    life of the process, per Gate."""
    keys = {n: SigningKey.generate() for n in ("root", "agent", "alice")}
    path = tmp_path / "agentgate.db"
    with _r23_gate(path, keys) as gate:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
    before = _threads()
    for _ in range(10):
        dropped = _r23_gate(path, keys)
        auth = dropped.authorize(agent, Call.tool("lookup", {"id": "x"}))
        dropped.run(auth, lambda: 1)
        dropped.flush()
        del dropped, auth
    deadline = time.monotonic() + 5
    while _threads() - before and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.05)
    assert not _threads() - before, f"{len(_threads() - before)} threads left by 10 dropped gates"


def test_a_model_call_charged_as_reserved_says_so_in_its_outcome(r27_gate: Gate) -> None:
    gate = r27_gate
    """A model call that ran and reported no usage (``spent`` returns ``None``: a chat model
    without usage metadata) is charged its whole reservation, as documented, but its ``outcome``
    is a plain ``ok`` whose ``budget_delta`` reads as the tokens it used: an auditor cannot tell
    the fallback from a measured usage. The outcome should say it (as the ``USAGE_UNREAD`` case
    does: 'charged as reserved')."""
    keys = _keys()
    boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
    auth = gate.authorize(boss, Call.model("scripted", {}), tokens=(100, 200))
    gate.run(auth, lambda: "hi", spent=lambda _: None)
    gate.flush()
    (outcome,) = [e for e in _read(gate.store) if e["kind"] == "outcome"]
    assert outcome["budget_delta"] == 300
    assert any("charged as reserved" in r for r in outcome["reasons"]), outcome["reasons"]


@pytest.mark.postgres
def test_an_outcome_pending_across_a_server_restart_is_committed_later(postgres_server: Any) -> None:
    """A model call ran and its outcome waits for the background commit (``linger_s``). The
    server restarts (``pg_ctl stop -m fast``, down half a second): the commit takes a pooled
    connection the restart killed, fails, and ``Gate._write_outcomes`` logs "1 outcomes not
    recorded" and drops the batch (an outage longer than the pool's timeout does the same).
    The log keeps an allow without an outcome and the reservation (20) stays held for good,
    although the Gate still held the outcome and its next transaction could have committed it,
    as a decision that carried it and failed does (``PendingOutcomes.restore``)."""
    store = PostgresStore(postgres_server.create_database())
    gate = Gate(parse_policy(_r27_policy_text(), source="r30.yaml"), store)
    keys = _keys()
    boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
    auth = gate.authorize(boss, Call.model("scripted"), tokens=(10, 10))
    postgres_server.stop("fast")
    try:
        assert gate.run(auth, lambda: "hi", spent=lambda _: (1, 1)) == "hi"  # the call ran
        time.sleep(0.5)  # the background commit fails on a dead connection and drops the outcome
    finally:
        postgres_server.start()
    deadline = time.monotonic() + 5
    outcomes: list[Any] = []
    while not outcomes and time.monotonic() < deadline:  # the first use of a pooled connection may fail
        gate.flush()
        outcomes = [e for e in gate.audit.entries() if e.kind == "outcome"]
        time.sleep(0.1)
    assert [o.ref for o in outcomes] == [auth.audit_index]
    assert gate.budget_usage(boss)[boss.grant_id][0] == 2  # charged what it spent, not the 20 reserved
    gate.close()


@pytest.mark.postgres
def test_an_outcome_on_postgresql_records_what_an_absurd_usage_was_charged(postgres_url: str) -> None:
    from agentgate.store._postgres import PostgresStore

    gate = _gate(PostgresStore(postgres_url))
    try:
        agent = _agent(gate)
        auth = gate.authorize(agent, MODEL, tokens=(10, 5))
        assert auth.allowed
        # The most input tokens a call may report (more is garbage, charged as reserved: review R56).
        gate.run(auth, lambda: "text", spent=lambda _: (MAX_USAGE_TOKENS, 5))
        gate.flush()
        outcome = [e for e in gate.audit.entries() if e.kind == "outcome"][-1]
        over = [r for r in outcome.reasons if r.startswith("overran the usd_micros budget by ")]
        short = int(over[0].split(" by ")[1].split(";")[0])
        assert outcome.budget_delta - short == 10_000  # what the budget held, spent out
        assert gate.ledger.remaining(agent.grant_id) == 0
        assert list(gate.audit.verify().problems) == []
    finally:
        gate.close()
