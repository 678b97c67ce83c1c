"""Second regression review of R92 (item 2): an outcome whose transaction committed but whose
COMMIT answer was lost (``CommitUnknown``, PostgreSQL) was kept and recorded again at the next
call: a second, unlinked end of the lease in the signed log. Now the log is read for it, then
and again before it is written again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_broker_r92_outcome_once import _next_transaction_raises, _then_after_release
from test_broker_r92b_lock_exit_any_depth import _holding_job1
from test_broker_restart_budget import World

from agentgate.errors import CommitUnknown, StoreError


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    yield from _holding_job1(tmp_path, held_s=10)


def _next_commit_unknown(world: World) -> None:
    """The next transaction of the Gate's store commits, then raises ``CommitUnknown``."""
    _next_transaction_raises(world, CommitUnknown("connection lost after COMMIT was sent"))


def _outcomes(world: World) -> list[tuple[str, int | None]]:
    return [(e.status, e.ref) for e in world.process.entries() if e.kind == "outcome"]


@pytest.mark.parametrize("read_at_once", [True, False])
def test_an_outcome_committed_with_its_answer_lost_is_recorded_once(world: World, read_at_once: bool) -> None:
    gated = world.process.gated
    allow = next(e.index for e in world.process.entries() if e.kind == "allow")
    audit = gated.gate.audit
    if not read_at_once:  # the store still out as the log is read at once
        real_entry = audit.entry

        def unreadable(*args: Any, **kwargs: Any) -> Any:
            audit.entry = real_entry  # type: ignore[method-assign]
            raise StoreError("store unreachable")

        audit.entry = unreadable  # type: ignore[method-assign]
    _then_after_release(world, lambda: _next_commit_unknown(world))
    with pytest.raises(CommitUnknown):
        gated.release(world.trainer, "job1")
    assert [type(event).__name__ for event in gated.advance()] == ["LeaseEnded"]
    assert _outcomes(world) == [("lease_granted", allow), ("lease_released", allow)]  # no second end
    assert world.spent() == 4 * 10 * 1000


@pytest.mark.parametrize("calls_while_out", [1, 3])
def test_an_outcome_committed_as_the_store_went_out_is_recorded_once_when_it_is_back(
    world: World, calls_while_out: int
) -> None:
    """Third regression review of R92: the log read again at the next call, with the store still
    out, dropped what it was to look for (the read's failure taken for 'not there'), and the call
    after wrote the outcome again: a second, unlinked end of the lease. Now the read's failure
    keeps it, the event kept, until the log can be read."""
    gated = world.process.gated
    allow = next(e.index for e in world.process.entries() if e.kind == "allow")
    store, audit = gated.gate.store, gated.gate.audit
    real_transaction, real_entry = store.transaction, audit.entry
    down = [False]

    def transaction(**kwargs: Any) -> Any:
        if down[0]:
            raise StoreError("store unreachable")
        return real_transaction(**kwargs)

    def entry(*args: Any, **kwargs: Any) -> Any:
        if down[0]:
            raise StoreError("store unreachable")
        return real_entry(*args, **kwargs)

    class CommittedThenOut:
        def __enter__(self) -> Any:
            self.inner = real_transaction()
            return self.inner.__enter__()

        def __exit__(self, *exc: Any) -> None:
            self.inner.__exit__(*exc)
            store.transaction = transaction  # type: ignore[method-assign]
            down[0] = True
            raise CommitUnknown("connection lost after COMMIT was sent")

    audit.entry = entry  # type: ignore[method-assign]
    _then_after_release(world, lambda: setattr(store, "transaction", lambda **_: CommittedThenOut()))
    with pytest.raises(CommitUnknown):
        gated.release(world.trainer, "job1")
    for _ in range(calls_while_out):
        with pytest.raises(StoreError):
            gated.advance()
    down[0] = False
    assert [type(event).__name__ for event in gated.advance()] == ["LeaseEnded"]
    assert _outcomes(world) == [("lease_granted", allow), ("lease_released", allow)]  # no second end
    assert world.spent() == 4 * 10 * 1000
