"""GPU broker: all-or-nothing gang leases on a topology, with quotas, borrowing, reclaim,
priority preemption with checkpoint notices, and expiry. docs/broker.md explains the rules.

Typical use::

    broker = Broker(from_inventory(load_inventory("inventory.yaml")),
                    [TenantQuota("research", nominal=16, cohort="lab")])
    events = broker.submit(GangRequest("ft-1", "research", gpus=8,
                                       hint=WorkloadHint(bound="communication")))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentgate._lazy import lazy_exports

if TYPE_CHECKING:  # the names, for type checkers; at run time each is imported on first use
    from agentgate.dispatch.broker._broker import Broker, Clock, LeaseJournal, SteadyWallClock
    from agentgate.dispatch.broker._gated import GatedBroker, GatedRequest
    from agentgate.dispatch.broker._model import (
        MAX_PRIORITY,
        MAX_REQUEST_ID,
        MIN_PRIORITY,
        MIN_TTL_S,
        Bound,
        BrokerEvent,
        BrokerSnapshot,
        CheckpointNotice,
        EndReason,
        GangRequest,
        Granted,
        Kind,
        Lease,
        LeaseEnded,
        PreemptReason,
        QueuedRequest,
        TenantQuota,
        TimedOut,
        TopologyConstraint,
        Withdrawn,
        WorkloadHint,
    )
    from agentgate.dispatch.broker._placement import FirstFit, FreeIndex, PlacementPolicy, TopologyAware
    from agentgate.dispatch.broker._topology import (
        GpuSpec,
        Level,
        Topology,
        from_inventory,
        synthetic_topology,
    )

# ``GatedBroker`` brings the Gate (and with it the dispatcher); the store's broker tables need only
# the value types: each name is imported from its module on first use.
_EXPORTS: dict[str, str] = {
    "Bound": "agentgate.dispatch.broker._model",
    "Broker": "agentgate.dispatch.broker._broker",
    "BrokerEvent": "agentgate.dispatch.broker._model",
    "BrokerSnapshot": "agentgate.dispatch.broker._model",
    "CheckpointNotice": "agentgate.dispatch.broker._model",
    "Clock": "agentgate.dispatch.broker._broker",
    "EndReason": "agentgate.dispatch.broker._model",
    "FirstFit": "agentgate.dispatch.broker._placement",
    "FreeIndex": "agentgate.dispatch.broker._placement",
    "GangRequest": "agentgate.dispatch.broker._model",
    "GatedBroker": "agentgate.dispatch.broker._gated",
    "GatedRequest": "agentgate.dispatch.broker._gated",
    "GpuSpec": "agentgate.dispatch.broker._topology",
    "Granted": "agentgate.dispatch.broker._model",
    "Kind": "agentgate.dispatch.broker._model",
    "Lease": "agentgate.dispatch.broker._model",
    "LeaseEnded": "agentgate.dispatch.broker._model",
    "LeaseJournal": "agentgate.dispatch.broker._broker",
    "Level": "agentgate.dispatch.broker._topology",
    "PlacementPolicy": "agentgate.dispatch.broker._placement",
    "PreemptReason": "agentgate.dispatch.broker._model",
    "QueuedRequest": "agentgate.dispatch.broker._model",
    "SteadyWallClock": "agentgate.dispatch.broker._broker",
    "TenantQuota": "agentgate.dispatch.broker._model",
    "TimedOut": "agentgate.dispatch.broker._model",
    "Topology": "agentgate.dispatch.broker._topology",
    "TopologyAware": "agentgate.dispatch.broker._placement",
    "TopologyConstraint": "agentgate.dispatch.broker._model",
    "MAX_PRIORITY": "agentgate.dispatch.broker._model",
    "MAX_REQUEST_ID": "agentgate.dispatch.broker._model",
    "MIN_PRIORITY": "agentgate.dispatch.broker._model",
    "MIN_TTL_S": "agentgate.dispatch.broker._model",
    "Withdrawn": "agentgate.dispatch.broker._model",
    "WorkloadHint": "agentgate.dispatch.broker._model",
    "from_inventory": "agentgate.dispatch.broker._topology",
    "synthetic_topology": "agentgate.dispatch.broker._topology",
}


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


__all__ = [
    "MAX_PRIORITY",
    "MAX_REQUEST_ID",
    "MIN_PRIORITY",
    "MIN_TTL_S",
    "Bound",
    "Broker",
    "BrokerEvent",
    "BrokerSnapshot",
    "CheckpointNotice",
    "Clock",
    "EndReason",
    "FirstFit",
    "FreeIndex",
    "GangRequest",
    "GatedBroker",
    "GatedRequest",
    "GpuSpec",
    "Granted",
    "Kind",
    "Lease",
    "LeaseEnded",
    "LeaseJournal",
    "Level",
    "PlacementPolicy",
    "PreemptReason",
    "QueuedRequest",
    "SteadyWallClock",
    "TenantQuota",
    "TimedOut",
    "Topology",
    "TopologyAware",
    "TopologyConstraint",
    "Withdrawn",
    "WorkloadHint",
    "from_inventory",
    "synthetic_topology",
]
