"""Dead letters: persisted with the call, its authority chain and its error history; listed by the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentgate.cli.main import main
from agentgate.store import SQLiteStore, Store
from agentgate.store.dead_letters import AttemptError, DeadLetter, DeadLetterStore
from agentgate.store.leases import SharedBreakers
from agentgate.tasks import Attempt, RetryPolicy, Scheduler, SchedulerConfig, ToolCall, ToolLimits


class Transient(Exception):
    error_class = "transient"


def letter(n: int, tool: str = "payments.refund") -> DeadLetter:
    return DeadLetter(
        id=f"id-{n}",
        recorded_at=1_800_000_000.0 + n,
        tool=tool,
        tenant="acme",
        principal="did:key:z6Mk-agent",
        run_id="run-1",
        call_id=f"call-{n}",
        idempotency_key="ab" * 32,
        arguments_digest="cd" * 32,
        authority_chain=("grant-root", "grant-child"),
        reason="attempts_exhausted",
        errors=(
            AttemptError(1, "transient", "Transient", "503", 1.0),
            AttemptError(2, "timeout", "TimeoutError", "", 2.0),
        ),
    )


def test_dead_letters_round_trip_newest_first(store: Store) -> None:
    letters = DeadLetterStore(store)
    for n in range(3):
        letters.record(letter(n, tool="a" if n % 2 else "b"))
    found = letters.recent()
    assert [x.id for x in found] == ["id-2", "id-1", "id-0"]
    assert found[2] == letter(0, tool="b")
    assert [x.id for x in letters.recent(tool="a")] == ["id-1"]
    assert [x.id for x in letters.recent(limit=1)] == ["id-2"]


async def test_scheduler_persists_dead_letters(store: Store) -> None:
    policy = RetryPolicy(attempts=2, backoff_initial_s=0.001, retry_on=("transient",))
    scheduler = Scheduler(SchedulerConfig(tools={"refund": ToolLimits(retry=policy)}), store=store)

    async def tool(attempt: Attempt) -> None:
        raise Transient(f"upstream 503 on attempt {attempt.number}")

    call = ToolCall("refund", arguments={"amount": 10}, tenant="acme", authority_chain=("g1", "g2"))
    with pytest.raises(Transient):
        await scheduler.submit(call, tool)
    await scheduler.aclose()
    [stored] = DeadLetterStore(store).recent()
    assert stored == scheduler.dead_letters()[0]
    assert stored.authority_chain == ("g1", "g2") and stored.tenant == "acme"
    assert [e.message for e in stored.errors] == ["upstream 503 on attempt 1", "upstream 503 on attempt 2"]


def test_cli_lists_dead_letters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ag.db"
    with SQLiteStore(path) as store:
        DeadLetterStore(store).record(letter(1))
    assert main(["tasks", "dead-letters", "--store", str(path)]) == 0
    out = capsys.readouterr().out
    assert "payments.refund" in out and "attempts_exhausted" in out and "TimeoutError (timeout)" in out
    assert main(["tasks", "dead-letters", "--json", "--store", str(path)]) == 0
    [item] = json.loads(capsys.readouterr().out)
    assert item["authority_chain"] == ["grant-root", "grant-child"]
    assert [e["error_class"] for e in item["errors"]] == ["transient", "timeout"]
    empty = tmp_path / "empty.db"
    SQLiteStore(empty).close()
    assert main(["tasks", "dead-letters", "--store", str(empty)]) == 0
    assert capsys.readouterr().out == "no dead letters\n"
    # A mistyped path is an error, not an empty store created on the spot.
    assert main(["tasks", "dead-letters", "--store", str(tmp_path / "typo.db")]) == 2
    assert "no store at" in capsys.readouterr().err and not (tmp_path / "typo.db").exists()
    with pytest.raises(SystemExit) as exit_info:
        main(["tasks", "dead-letters", "--limit", "0", "--store", str(path)])
    assert exit_info.value.code == 2


@pytest.mark.parametrize("name", ["payments.refund", "tool:payments.refund"])
def test_cli_filters_dead_letters_by_tool_name_or_resource(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """``--tool`` takes the tool's name or its resource, as ``agentgate audit show --tool`` does
    (review r37: ``tool:payments.refund`` matched nothing)."""
    path = tmp_path / "ag.db"
    with SQLiteStore(path) as store:
        DeadLetterStore(store).record(letter(1))
        DeadLetterStore(store).record(letter(2, tool="search.web"))
    assert main(["tasks", "dead-letters", "--json", "--tool", name, "--store", str(path)]) == 0
    assert [item["id"] for item in json.loads(capsys.readouterr().out)] == ["id-1"]


def test_cli_lists_shared_breakers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ag.db"
    SQLiteStore(path).close()
    assert main(["tasks", "breakers", "--store", str(path)]) == 0
    assert capsys.readouterr().out == "no shared breaker states\n"
    with SQLiteStore(path) as store:
        SharedBreakers(store).publish("tool:search", "open", 1_800_000_000.0)
        SharedBreakers(store).publish("backend:gpu-1", "closed", 1_800_000_000.0)
    assert main(["tasks", "breakers", "--store", str(path)]) == 0
    out = capsys.readouterr().out
    assert "tool:search" in out and "open" in out and "2027-01-15" in out
    assert main(["tasks", "breakers", "--json", "--store", str(path)]) == 0
    states = {b["key"]: b["state"] for b in json.loads(capsys.readouterr().out)}
    assert states == {"tool:search": "open", "backend:gpu-1": "closed"}
