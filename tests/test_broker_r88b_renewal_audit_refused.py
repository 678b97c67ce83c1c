"""Review R88, again: ``GatedBroker.renew`` gave a store failure before the broker renewed as
``NotRenewed``, but caught ``StoreError`` alone. An outcome appended on its own (a grant the
renewal's own advance made to a waiting request, or one of the backlog) that the audit log
refuses is an ``AuditError``: it left ``renew`` as is, the lease not renewed, where the docs
promise ``NotRenewed``. Likewise a lease lost while renewed whose ``error`` outcome the log
refused was that ``AuditError``, not ``LeaseLost``. Both are now as for a ``StoreError``."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_broker_r88_renewal_not_renewed import _expiry, _renewed_as_it_ends
from test_broker_restart_budget import World, lease
from test_dispatch_unrecorded_ends import grant_outcomes_refused

from agentgate.errors import AuditError, NotRenewed


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = World(str(tmp_path / "agentgate.db"))
    yield made
    made.process.gate.close()


@contextlib.contextmanager
def _entries_refused(path: Path, holding: str) -> Iterator[None]:
    """The audit log refuses every entry whose text holds ``holding`` while inside."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    try:
        conn.execute(
            "CREATE TRIGGER r88b_refused BEFORE INSERT ON audit_log "
            f"WHEN CAST(NEW.entry AS TEXT) LIKE '%{holding}%' "
            "BEGIN SELECT RAISE(ABORT, 'r88b injected fault'); END"
        )
        yield
        conn.execute("DROP TRIGGER r88b_refused")
    finally:
        conn.close()


def _a_expired_and_c_waiting(world: World) -> None:
    """Leases ``a`` and ``b`` of 4 GPUs each (ending at 1060 and 1065), ``c`` waiting for a's GPUs,
    and the clock at 1061: a renewal of ``b`` now grants ``c`` in its own advance."""
    gated = world.process.gated
    assert gated.submit(world.trainer, lease("a", gpus=4)).allowed  # expires at 1060
    world.clock.now += 5
    assert gated.submit(world.trainer, lease("b", gpus=4)).allowed  # expires at 1065
    assert gated.submit(world.trainer, lease("c", gpus=4)).allowed  # waits for a's GPUs
    world.clock.now = 1061.0  # a expired: the renewal's own advance grants c


def test_a_renewal_whose_own_grant_cannot_be_recorded_is_not_renewed_and_says_so(world: World) -> None:
    gated = world.process.gated
    _a_expired_and_c_waiting(world)
    with grant_outcomes_refused(Path(world.url)), pytest.raises(NotRenewed) as raised:
        gated.renew(world.trainer, "b")
    assert isinstance(raised.value.__cause__, AuditError)
    assert "'b' was not renewed" in str(raised.value) and "r41 injected fault" in str(raised.value)
    assert _expiry(world, "b") == 1065.0  # not renewed: it ends when it did
    assert gated.renew(world.trainer, "b").expires_at == 1121.0  # once the log writes


def test_a_lease_lost_while_renewed_is_lost_when_the_log_refuses_its_outcome(world: World) -> None:
    assert world.process.gated.submit(world.trainer, lease("ft-1")).allowed  # expires at 1060
    # the log refuses the outcome that closes the renewal's allow
    lost = _renewed_as_it_ends(world, _entries_refused(Path(world.url), "ended before it was renewed"))
    assert isinstance(lost.__cause__, AuditError)
