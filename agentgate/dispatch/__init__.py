"""Model-call dispatch: the GPU inventory, backend clients and the router."""

from __future__ import annotations

from agentgate.dispatch.inventory import (
    GPU,
    Backend,
    BackendCost,
    Interconnect,
    Inventory,
    Node,
    Rack,
    inventory_from_mapping,
    load_inventory,
    parse_inventory,
)

__all__ = [
    "GPU",
    "Backend",
    "BackendCost",
    "Interconnect",
    "Inventory",
    "Node",
    "Rack",
    "inventory_from_mapping",
    "load_inventory",
    "parse_inventory",
]
