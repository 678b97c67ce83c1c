"""GPU broker: all-or-nothing gang leases on a topology, with quotas, borrowing, reclaim,
priority preemption with checkpoint notices, and expiry. docs/broker.md explains the rules.

Typical use::

    broker = Broker(from_inventory(load_inventory("inventory.yaml")),
                    [TenantQuota("research", nominal=16, cohort="lab")])
    events = broker.submit(GangRequest("ft-1", "research", gpus=8,
                                       hint=WorkloadHint(bound="communication")))
"""

from __future__ import annotations

from agentgate.dispatch.broker._broker import Broker, Clock, LeaseJournal, SteadyWallClock
from agentgate.dispatch.broker._gated import GatedBroker, GatedRequest
from agentgate.dispatch.broker._model import (
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
from agentgate.dispatch.broker._topology import GpuSpec, Level, Topology, from_inventory, synthetic_topology

__all__ = [
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
