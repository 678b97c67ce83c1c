"""Lead's tests of review R48's product changes.

- The SQLite store indexes grants by audience: ``revoke_holder`` (``grant revoke --holder``, a
  leaked key's grants) reads under the store's write lock, which every decision waits for, and
  scanned the whole grants table.
- A key's own text given where a key file's path or a did:key belongs (review R48's leaks helper
  found the log key, a previous log key and a policy's ``did:``; the CLI's flags too) is refused
  without being quoted.
- The scheduler forgets per-name state past ``PER_NAME_STATE`` names (review R48's bounds helper;
  its tests are in tests/test_tasks_bounded_state.py): here, the token buckets.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from test_policy_lint_bypass_siblings import _findings as _lint_findings

from agentgate.capabilities import Call
from agentgate.cli.main import main
from agentgate.errors import CircuitOpen
from agentgate.gate import Authorization
from agentgate.gate._config import GATE_RESULTS_KEPT, scheduler_config
from agentgate.keys import SigningKey, save_key
from agentgate.policy import parse_policy
from agentgate.store import open_store
from agentgate.store.grants import GrantRepository
from agentgate.tasks import Scheduler, SchedulerConfig, SyncScheduler, ToolCall
from agentgate.tasks._call import OVERFLOW_BREAKER
from agentgate.tasks._config import BreakerPolicy, RateLimit, ToolLimits
from agentgate.tasks._limits import PER_NAME_STATE
from agentgate.tasks._token_bucket import TokenBucket

_HOLDER_READ = (
    "SELECT g.id FROM agentgate_grants g LEFT JOIN agentgate_revocations r ON r.grant_id = g.id "
    "WHERE g.audience = ? ORDER BY g.id"
)


def _plan(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        return " | ".join(
            str(row[-1]) for row in conn.execute("EXPLAIN QUERY PLAN " + _HOLDER_READ, ("did:key:zA",))
        )


def _rows(n: int, audience: str) -> list[tuple[str, str | None, str, str, int, str]]:
    return [(f"{audience}-g{i}", None, "did:key:zIssuer", audience, 2_000_000_000, "token") for i in range(n)]


def test_a_new_sqlite_store_seeks_a_holders_grants_by_index(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    store = open_store(str(path))
    repo = GrantRepository(store)
    try:
        repo.record_grants(_rows(3, "did:key:zA") + _rows(2, "did:key:zB"), now=1)
        assert "agentgate_grants_audience" in _plan(path)
        assert "SCAN g" not in _plan(path)
        assert repo.revoke_holder("did:key:zA", now=2) == (
            ["did:key:zA-g0", "did:key:zA-g1", "did:key:zA-g2"],
            [],
        )
        assert repo.revoke_holder("did:key:zA", now=3) == (
            [],
            ["did:key:zA-g0", "did:key:zA-g1", "did:key:zA-g2"],
        )
    finally:
        repo.close()
        store.close()


def test_a_store_made_before_the_index_gets_it_when_opened_and_keeps_its_grants(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:  # the grants table as earlier versions made it
        conn.executescript(
            "CREATE TABLE agentgate_grants (id TEXT PRIMARY KEY, parent TEXT, issuer TEXT NOT NULL, "
            "audience TEXT NOT NULL, expires INTEGER NOT NULL, recorded_at INTEGER NOT NULL, token TEXT NOT NULL);"
            "CREATE INDEX agentgate_grants_parent ON agentgate_grants (parent);"
            "CREATE TABLE agentgate_revocations (grant_id TEXT PRIMARY KEY, revoked_at INTEGER NOT NULL, "
            "reason TEXT NOT NULL DEFAULT '');"
        )
        conn.executemany(
            "INSERT INTO agentgate_grants VALUES (?, ?, ?, ?, ?, 1, ?)",
            [
                (gid, parent, issuer, aud, exp, tok)
                for gid, parent, issuer, aud, exp, tok in _rows(2, "did:key:zOld")
            ],
        )
    assert "SCAN g" in _plan(path)
    store = open_store(str(path))
    repo = GrantRepository(store)
    try:
        assert "agentgate_grants_audience" in _plan(path)
        assert repo.revoke_holder("did:key:zOld", now=2) == (["did:key:zOld-g0", "did:key:zOld-g1"], [])
    finally:
        repo.close()
        store.close()


def test_a_private_key_given_for_a_public_key_flag_is_refused_without_being_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``grant issue --to "$(cat agent.key)"`` (the private key's text where a did:key or a
    ``.pub`` file belongs) exits 2 naming the mistake; no piece of the key reaches the output,
    where the error quoted it as a file name that could not be read."""
    key_file, _ = save_key(SigningKey.generate(), tmp_path, "agent")
    issuer, _ = save_key(SigningKey.generate(), tmp_path, "root")
    pem = key_file.read_text()
    seed_line = pem.splitlines()[1]
    for given in (pem, seed_line):
        code = main(
            ["grant", "issue", "--issuer", str(issuer), "--to", given, "--allow", "tool:x", "--ttl", "1h"]
        )
        out, err = capsys.readouterr()
        assert code == 2 and "looks like a key itself" in err, (code, err)
        assert seed_line[24:40] not in out + err


async def test_token_buckets_of_idle_tools_are_forgotten_past_the_bound_and_a_drained_one_is_kept() -> None:
    """Every tool of a default rate has its bucket: past ``PER_NAME_STATE`` names the full ones
    (what a new bucket would be) are dropped, never one that still lacks tokens (a caller inventing
    tool names must not refill another tool's bucket)."""
    config = SchedulerConfig(
        result_cache_size=0, default_tool=ToolLimits(rate=RateLimit(per_second=0.001, burst=2))
    )
    scheduler = Scheduler(config)

    async def ok(_attempt: object) -> str:
        return "ok"

    try:
        assert await scheduler.submit(ToolCall(tool="drained"), ok) == "ok"  # one token of two left
        drained = scheduler.shared.buckets["drained"]
        for i in range(PER_NAME_STATE + 10):
            scheduler.shared.buckets[f"idle-{i}"] = TokenBucket(1000.0, 2)  # full
        assert await scheduler.submit(ToolCall(tool="new"), ok) == "ok"
        assert len(scheduler.shared.buckets) == 2
        assert scheduler.shared.buckets["drained"] is drained and drained.level < 2
    finally:
        await scheduler.aclose()


def test_a_gates_scheduler_keeps_the_results_of_its_last_1024_calls_not_10000() -> None:
    """Review R48 (bounds): a Gate's scheduler kept the results of 10,000 calls per event loop,
    whatever their size (a page, a file); it keeps 1,024."""
    policy = parse_policy("version: 1\ntools:\n  search: {idempotent: true}\n")
    assert scheduler_config(policy).result_cache_size == GATE_RESULTS_KEPT == 1_024


def test_a_listed_value_the_rules_bounds_exclude_opens_no_path_around_a_gate() -> None:
    """Kills R48 lintkeys' l38 (``_of_type`` keeping every listed value, ``constraint.allows``
    dropped): a wildcard rule allowing ``amount in [100, 900]`` and ``<= 500`` reaches the gated
    tool's sibling with 100 only, under the gate's ``> 500``: no ``approval_gate_bypass``; without
    the bound, 900 is a path around it."""
    body = """tools:
  payments.refund:
    args: {order_id: {type: string, required: true}, amount: {type: integer, required: true}}
  payments.refund_partial:
    args: {order_id: {type: string, required: true}, amount: {type: integer, required: true}}
roles:
  r:
    capabilities:
      - {resource: "tool:payments.*", constraints: {amount: {in: [100, 900], le: 500}}}
    ttl_s: 600
approvals:
  large-refund:
    resource: tool:payments.refund
    when: {amount: {gt: 500}}
    approvers: [alice]
"""
    assert _lint_findings(body, "approval_gate_bypass") == []
    found = _lint_findings(body.replace("in: [100, 900], le: 500", "in: [100, 900]"), "approval_gate_bypass")
    assert [f.code for f in found] == ["approval_gate_bypass"]


def test_an_authorizations_repr_holds_no_argument_value_nor_reason() -> None:
    """Review R48 (leaks, noted): ``repr(Authorization)`` showed the call's arguments and the
    reasons, which may quote them, though the policy keeps some out of logs; an application
    logging it (``log.info("%r", auth)``) wrote them. It shows the verdict, the resource, the
    audit index, the rule and the findings' codes."""
    auth = Authorization(
        verdict="deny",
        call=Call.tool("payments.charge", {"card": "4111-1111-1111-1111"}),
        identity=None,
        reasons=("card '4111-1111-1111-1111' is not allowed",),
        audit_index=7,
    )
    shown = repr(auth)
    assert "4111" not in shown and "card" not in shown, shown
    assert "verdict='deny'" in shown and "tool:payments.charge" in shown and "audit_index=7" in shown


def test_past_the_bound_invented_tools_share_one_breaker_and_a_named_tool_keeps_its_own() -> None:
    """Breakers are never dropped (a running call holds its own): past ``PER_NAME_STATE`` keys,
    tools the config does not name share ``OVERFLOW_BREAKER``, so a failing invented tool opens
    that one, never the breaker of a tool the config names, first seen after the flood."""
    config = SchedulerConfig(
        result_cache_size=0,
        tools={"pay": ToolLimits()},
        breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=3600),
    )
    with SyncScheduler(config) as sync:
        shared = sync.scheduler.shared
        for i in range(PER_NAME_STATE):
            shared.breaker_for(ToolCall(tool=f"made-up-{i}"))
        late = [shared.breaker_for(ToolCall(tool=f"late-{i}")) for i in range(3)]
        assert {b.key for b in late} == {OVERFLOW_BREAKER} and len({id(b) for b in late}) == 1

        def boom(_attempt: object) -> str:
            raise ConnectionError("down")

        with pytest.raises(ConnectionError):
            sync.submit(ToolCall(tool="late-0"), boom)
        with pytest.raises(CircuitOpen):
            sync.submit(ToolCall(tool="late-1"), lambda _a: "ok")  # shares the open breaker
        assert sync.submit(ToolCall(tool="pay"), lambda _a: "ok") == "ok"  # named: its own
        assert shared.breaker_for(ToolCall(tool="pay")).key == "tool:pay"
        assert sync.submit(ToolCall(tool="made-up-0"), lambda _a: "ok") == "ok"  # seen before: its own
        assert len(shared.breakers) == PER_NAME_STATE + 2
