"""The dead letters' store (agentgate/store/dead_letters.py): a letter keeps the call, its authority
chain and its error history, and is listed newest first, by tool; the scheduler records one for a
call that gave up; a letter's text is stored with a NUL escaped, the same on every store;
``prune(before)`` forgets only letters recorded before the cut. (The CLI's listing is in
tests/test_cli_tasks.py.)
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from agentgate.errors import InputError
from agentgate.store import SQLiteStore, Store
from agentgate.store.dead_letters import AttemptError, DeadLetter, DeadLetterStore
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


async def test_a_nul_in_a_dead_letters_text_is_stored_escaped(tmp_path: Path) -> None:
    """Kills: ``_storable`` passing text through unchanged (the NUL escape dropped): a run id a
    model made with a NUL was kept raw on SQLite, while PostgreSQL refuses the whole letter.
    Rule: a dead letter's text keeps a NUL as the four characters ``\\\\x00``, the same on both
    stores, so the letter is recorded (not counted as lost) and reads back alike."""
    from agentgate.store.dead_letters import DeadLetterStore

    store = SQLiteStore(tmp_path / "s.db")
    scheduler = Scheduler(store=store)

    async def down(attempt: Attempt) -> None:
        raise ConnectionRefusedError("upstream down")

    with pytest.raises(ConnectionRefusedError):
        await scheduler.submit(ToolCall("t", run_id="run\x00x", call_id="c\x00"), down)
    assert scheduler.metrics.count("dead_letter_not_stored", "t") == 0
    [letter] = DeadLetterStore(store).recent()
    assert (letter.run_id, letter.call_id) == ("run\\x00x", "c\\x00")
    await scheduler.aclose()
    store.close()


def test_prune_keeps_a_dead_letter_recorded_at_the_cut(store: Store) -> None:
    """``prune(before)`` forgets letters recorded *before* ``before``: one recorded at that very
    second stays. Kills: ``recorded_at <= ?`` in ``DeadLetterStore.prune``."""
    letters = DeadLetterStore(store)
    for n, at in enumerate((99.0, 100.0, 101.0)):
        letters.record(
            DeadLetter(f"id-{n}", at, "t", "acme", "agent", None, None, None, "d", (), "deadline", ())
        )
    assert letters.prune(100.0) == 1
    assert [x.id for x in letters.recent()] == ["id-2", "id-1"]


@pytest.mark.parametrize(
    "limit", [-1, 0, True, 1.5, "5", None, 2**63, pytest.param(-(10**5000), id="-10**5000")]
)
def test_a_limit_that_is_not_a_positive_whole_number_is_refused_alike_on_both_stores(
    store: Store, limit: object
) -> None:
    """Review R57: ``recent(limit=-1)`` listed every letter on SQLite (``LIMIT -1`` is no limit)
    and was a ``StoreError`` on PostgreSQL (``0`` listed none, ``True`` one).
    Rule: a limit that is not a whole number from 1 to 2**63 - 1 (a bool neither) is an
    ``InputError`` with the same message on both stores, and nothing is listed."""
    letters = DeadLetterStore(store)
    letters.record(letter(1))
    with pytest.raises(
        InputError,
        match=r"^the dead letters' limit must be a whole number from 1 to 9223372036854775807, got ",
    ):
        letters.recent(limit=limit)  # type: ignore[arg-type]
    assert [x.id for x in letters.recent(limit=2**63 - 1)] == ["id-1"]


@pytest.mark.parametrize(
    "before", [math.nan, math.inf, -math.inf, True, "100", None, pytest.param(10**400, id="10**400")]
)
def test_prune_refuses_a_time_that_is_not_a_finite_number_and_forgets_nothing(
    store: Store, before: object
) -> None:
    """Review R57: ``prune(before=nan)`` forgot every dead letter on PostgreSQL (NaN sorts above
    every number there) and none on SQLite (NaN is bound as NULL). Rule: a prune time that is not
    a finite number is an ``InputError`` on both stores, and every letter stays."""
    letters = DeadLetterStore(store)
    letters.record(letter(1))
    with pytest.raises(
        InputError, match=r"^the dead letters' prune time must be a finite number of Unix seconds"
    ):
        letters.prune(before)  # type: ignore[arg-type]
    assert [x.id for x in letters.recent()] == ["id-1"]
