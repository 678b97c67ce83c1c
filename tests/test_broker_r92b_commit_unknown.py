"""Second regression review of R92 (item 2): an outcome whose transaction committed but whose
COMMIT answer was lost (``CommitUnknown``, PostgreSQL) was kept and recorded again at the next
call: a second, unlinked end of the lease in the signed log. Now the log is read for it, then
and again before it is written again."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest
from test_broker_restart_budget import World

from agentgate.dispatch.broker import GangRequest
from agentgate.errors import CommitUnknown, StoreError


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = World(f"sqlite:///{tmp_path / 'agentgate.db'}", budget=10_000_000)
    made.process.gated.submit(made.trainer, GangRequest("job1", "x", 4, gpu_type="H100"))
    made.clock.now += 10
    yield made
    made.process.gate.close()


def _next_commit_unknown(world: World) -> None:
    """The next transaction of the Gate's store commits, then raises ``CommitUnknown``."""
    store = world.process.gated.gate.store
    real = store.transaction

    class Committed:
        def __enter__(self) -> Any:
            self.inner = real()
            return self.inner.__enter__()

        def __exit__(
            self, *exc: tuple[type[BaseException] | None, BaseException | None, TracebackType | None]
        ) -> None:
            self.inner.__exit__(*exc)
            store.transaction = real  # type: ignore[method-assign]
            raise CommitUnknown("connection lost after COMMIT was sent")

    store.transaction = lambda **_: Committed()  # type: ignore[method-assign]


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
    broker = world.process.broker
    release = broker.release

    def released(lease_id: str) -> Any:
        broker.release = release  # type: ignore[method-assign]
        events = release(lease_id)
        _next_commit_unknown(world)
        return events

    broker.release = released  # type: ignore[method-assign]
    with pytest.raises(CommitUnknown):
        gated.release(world.trainer, "job1")
    assert [type(event).__name__ for event in gated.advance()] == ["LeaseEnded"]
    assert _outcomes(world) == [("lease_granted", allow), ("lease_released", allow)]  # no second end
    assert world.spent() == 4 * 10 * 1000
