"""Regression review of R92 (item 2): an event left ``GatedBroker._unrecorded`` only once its
outcome's span was made, after the outcome's transaction committed, so an interrupt in between
(a Ctrl-C handled in the span, or as the transaction ended) recorded the event again at the next
call: a lease with two ends in the signed log. Now it leaves once the transaction committed, and
an interrupt at the transaction's end keeps it only where the log does not hold its outcome."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from test_broker_r92b_lock_exit_any_depth import _holding_job1
from test_broker_restart_budget import World

from agentgate.dispatch.broker import LeaseEnded
from agentgate.dispatch.broker._gated import GatedBroker


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    yield from _holding_job1(tmp_path, held_s=10)


def _then_after_release(world: World, then: Callable[[], object]) -> None:
    """Make the broker's next ``release`` return its events, then call ``then`` (once). Shared
    with test_broker_r92b_commit_unknown."""
    broker = world.process.broker
    release = broker.release

    def released(lease_id: str) -> object:
        broker.release = release  # type: ignore[method-assign]
        events = release(lease_id)
        then()
        return events

    broker.release = released  # type: ignore[method-assign]


def _next_transaction_raises(world: World, error: BaseException, *, committed: bool = True) -> None:
    """The next transaction of the Gate's store ends (committed, or rolled back where not
    ``committed``), gives the store its own transactions back, then raises ``error``: an interrupt
    or a lost connection as the store's end returns. Shared with test_broker_r92b_commit_unknown."""
    store = world.process.gated.gate.store
    real = store.transaction

    class _Ended:
        def __enter__(self) -> object:
            self.inner = real()
            return self.inner.__enter__()

        def __exit__(self, *exc: object) -> None:
            store.transaction = real  # type: ignore[method-assign]
            if committed:
                self.inner.__exit__(*exc)  # type: ignore[arg-type]
            else:
                self.inner.__exit__(KeyboardInterrupt, KeyboardInterrupt(), None)  # rolled back
            raise error

    store.transaction = lambda **_: _Ended()  # type: ignore[method-assign]


def _ends(world: World) -> list[tuple[str | None, int | None]]:
    return [(e.status, e.ref) for e in world.process.entries() if e.kind == "outcome"][1:]


def test_an_interrupt_in_the_outcomes_span_records_the_end_once(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    gated = world.process.gated
    real = GatedBroker._outcome_span

    def interrupted_once(self: GatedBroker, *args: object) -> None:
        monkeypatch.setattr(GatedBroker, "_outcome_span", real)
        raise KeyboardInterrupt  # handled as the span is made, the entry committed

    monkeypatch.setattr(GatedBroker, "_outcome_span", interrupted_once)
    with pytest.raises(KeyboardInterrupt):
        gated.release(world.trainer, "job1")
    assert list(gated._unrecorded) == []
    assert [type(event) for event in gated.advance()] == [LeaseEnded]  # given out once, all the same
    allow = next(e.index for e in world.process.entries() if e.kind == "allow")
    assert _ends(world) == [("lease_released", allow)]
    assert world.spent() == 4 * 10 * 1000


def test_an_interrupt_as_the_outcomes_transaction_ends_records_the_end_once(world: World) -> None:
    gated = world.process.gated
    _then_after_release(world, lambda: _next_transaction_raises(world, KeyboardInterrupt()))  # committed
    with pytest.raises(KeyboardInterrupt):
        gated.release(world.trainer, "job1")
    assert list(gated._unrecorded) == []
    gated.advance()
    allow = next(e.index for e in world.process.entries() if e.kind == "allow")
    assert _ends(world) == [("lease_released", allow)]


def test_a_commit_the_store_refuses_keeps_the_event(world: World) -> None:
    gated = world.process.gated
    _then_after_release(world, lambda: _next_transaction_raises(world, KeyboardInterrupt(), committed=False))
    with pytest.raises(KeyboardInterrupt):
        gated.release(world.trainer, "job1")
    assert [type(event) for event in gated._unrecorded] == [LeaseEnded]  # not in the log: kept
    gated.advance()
    allow = next(e.index for e in world.process.entries() if e.kind == "allow")
    assert _ends(world) == [("lease_released", allow)]
    assert world.spent() == 4 * 10 * 1000
