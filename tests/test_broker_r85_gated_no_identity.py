"""Review R85: ``GatedBroker.release`` and ``renew`` without an identity (agentgate/dispatch/broker).

``submit(None, ...)`` is a refusal the Gate audits, but ``release(None, id)`` and ``renew(None, id)``
on a live lease were an ``AttributeError`` (``None.did``). Now an identity that is no
``AgentIdentity`` holds no lease: ``LeaseLost``, the answer a caller gets for another holder's
lease, before any decision, the lease untouched.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_broker_gated import Setup

from agentgate.dispatch.broker import GangRequest
from agentgate.errors import LeaseLost


@pytest.mark.parametrize("call", ["release", "renew"])
@pytest.mark.parametrize("identity", [None, "trainer"], ids=["none", "text"])
def test_a_caller_without_an_identity_holds_no_lease(tmp_path: Path, call: str, identity: object) -> None:
    setup = Setup(tmp_path)
    try:
        setup.gated.submit(setup.ids["trainer"], GangRequest("r1", "x", 1, gpu_type="H100"))
        (held,) = setup.broker.leases()
        decided = len(setup.entries())
        with pytest.raises(LeaseLost, match=r"^lease 'r1' is not held by you"):
            getattr(setup.gated, call)(identity, "r1")
        assert setup.broker.leases() == [held] and len(setup.entries()) == decided
        setup.gated.release(setup.ids["trainer"], "r1")  # its holder still may
        assert setup.broker.leases() == []
    finally:
        setup.gate.close()
