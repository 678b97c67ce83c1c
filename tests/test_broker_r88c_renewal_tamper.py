"""Review R88c: ``GatedBroker.renew`` caught every ``AuditError`` from deciding the renewal as
``NotRenewed`` saying "the store could not record its renewal", ``TamperDetected`` (an
``AuditError``) included: a log that does not verify was told as a store failure to retry past.
``TamperDetected`` now comes out as is (the lease not renewed), and ``NotRenewed`` names what
failed: the store, or the audit log. (A lease that ended while its renewal was decided is
``LeaseLost`` whatever the log does, the ``TamperDetected`` its cause: review R88d,
test_broker_r88d_lost_lease_tamper.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_broker_r88_renewal_not_renewed import _expiry
from test_broker_r88b_renewal_audit_refused import _a_expired_and_c_waiting
from test_broker_restart_budget import World, lease
from test_dispatch_unrecorded_ends import grant_outcomes_refused

from agentgate.errors import AuditError, NotRenewed, TamperDetected


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = World(str(tmp_path / "agentgate.db"))
    yield made
    made.process.gate.close()


def test_a_log_that_does_not_verify_is_told_as_itself_not_as_not_renewed(world: World) -> None:
    gated = world.process.gated
    gate = world.process.gate
    assert gated.submit(world.trainer, lease("ft-1")).allowed  # expires at 1060
    world.clock.now += 30

    def tampered(*args: object, **kwargs: object) -> object:
        raise TamperDetected("audit log: entry 3 does not match its hash")

    gate.authorize = tampered  # type: ignore[method-assign]
    with pytest.raises(TamperDetected, match="entry 3 does not match its hash") as raised:
        gated.renew(world.trainer, "ft-1")
    assert not isinstance(raised.value, NotRenewed)
    assert _expiry(world, "ft-1") == 1060.0  # not renewed


def test_an_outcome_the_audit_log_refuses_is_named_as_the_logs_failure(world: World) -> None:
    gated = world.process.gated
    _a_expired_and_c_waiting(world)
    with grant_outcomes_refused(Path(world.url)), pytest.raises(NotRenewed) as raised:
        gated.renew(world.trainer, "b")
    assert isinstance(raised.value.__cause__, AuditError)
    assert "the audit log could not record its renewal" in str(raised.value)
    assert "the store could not" not in str(raised.value)
    assert _expiry(world, "b") == 1065.0
