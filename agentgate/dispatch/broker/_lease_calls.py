"""How a lease request is put to the Gate (the rules are the ``GatedBroker`` module's docstring):
its resource, ``gpu:TYPE``; its times as the decision sees them; and whether, and how long, a
lease may wait or run within its identity's grant chain."""

from __future__ import annotations

import time

from agentgate.capabilities import canonical_resource
from agentgate.dispatch.broker._model import GangRequest
from agentgate.dispatch.broker._quoting import quoted
from agentgate.errors import BrokerError, CapabilityError
from agentgate.gate import AgentIdentity
from agentgate.store import Store
from agentgate.store.grants import GrantRepository


def _outlived(identity: AgentIdentity, ttl_s: float) -> str | None:
    """Why a lease running ``ttl_s`` from now would outlive ``identity``'s grant chain (the
    chain's earliest expiry), or ``None`` when it would not. A lease never does: the renewals,
    which check the authority again, must come before the grant is gone."""
    left = identity.chain.expires - time.time()
    if ttl_s <= left:
        return None
    return (
        f"a ttl_s of {ttl_s:g} s would outlive the grant, which expires in {max(0.0, left):.0f} s; "
        "a lease never outlives the grant that decided it"
    )


def _wait_left(identity: AgentIdentity, ttl_s: float) -> float:
    """How long a request may wait in the queue: a lease granted later than this would outlive
    ``identity``'s grant chain (``_outlived`` checks the lease as if granted at once)."""
    return max(0.0, identity.chain.expires - time.time() - ttl_s)


def _revoked_link(store: Store, tip: str) -> str | None:
    """The first revoked grant of the chain whose tip is ``tip``, walking up from the tip as
    ``store`` records the chain (the Gate records every link of a chain it allows, in the allow's
    transaction), or ``None`` when none is: a revocation is of a grant and every grant below it.
    One read per link (a chain has at most 16), made only as a waiting lease is about to be
    granted (``GatedBroker._revoked_grant``)."""
    return next((row.id for row in GrantRepository.recorded_chain(store, tip) if row.revoked), None)


def _resource(request: GangRequest) -> str:
    if not request.gpu_type:
        raise BrokerError(
            f"request {quoted(request.id)}: name its gpu_type: grants cover gpu:TYPE, e.g. gpu:h100"
        )
    try:
        return canonical_resource(f"gpu:{request.gpu_type.lower()}")
    except CapabilityError as exc:
        raise BrokerError(
            f"request {quoted(request.id)}: gpu_type {quoted(request.gpu_type)} is no resource name: {exc}"
        ) from exc


def _number(seconds: float) -> int | float:
    """A time as the decision sees it: an integer when it is one (``600``, not ``600.0``), since
    the capability algebra compares numbers exactly; infinite times are refused by ``GangRequest``."""
    return int(seconds) if float(seconds).is_integer() else float(seconds)


def _resource_or_any(request: GangRequest) -> str:
    try:
        return _resource(request)
    except BrokerError:
        return "gpu:*"
