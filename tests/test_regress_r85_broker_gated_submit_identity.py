"""Regression review of R85: ``GatedBroker.submit`` with an identity that is text
(agentgate/dispatch/broker).

R85 made ``release`` and ``renew`` with an identity that is no ``AgentIdentity`` a ``LeaseLost``;
their twin ``submit`` read ``identity.did`` of a DID or a name given as text, an
``AttributeError``. Now it is the ``InputError`` ``Gate.authorize`` gives for it, before anything
is written; ``None`` is still the Gate's audited refusal.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_broker_gated import Setup

from agentgate.dispatch.broker import GangRequest
from agentgate.errors import InputError


@pytest.mark.parametrize("live", [False, True], ids=["free-id", "own-live-id"])
def test_a_text_identity_is_refused_as_the_gate_refuses_it(tmp_path: Path, live: bool) -> None:
    setup = Setup(tmp_path)
    try:
        if live:
            setup.gated.submit(setup.ids["trainer"], GangRequest("r1", "x", 1, gpu_type="H100"))
        leases, written = setup.broker.leases(), len(setup.entries())
        for identity in ("trainer", setup.ids["trainer"].did):
            with pytest.raises(InputError, match=r"^identity must be an AgentIdentity .* or None, got a str"):
                setup.gated.submit(identity, GangRequest("r1", "x", 1, gpu_type="H100"))  # type: ignore[arg-type]
        assert setup.broker.leases() == leases and len(setup.entries()) == written
        assert not setup.gated.submit(None, GangRequest("r2", "x", 1, gpu_type="H100")).allowed  # audited
        assert len(setup.entries()) == written + 1
    finally:
        setup.gate.close()
