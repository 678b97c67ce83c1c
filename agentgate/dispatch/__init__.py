"""Model-call dispatch: the GPU inventory, backend clients, the router and the dispatcher."""

from __future__ import annotations

from agentgate.dispatch._policy import AllowedBackend, Candidate, RoutePlan, RouteRequest, RoutingPolicy
from agentgate.dispatch.backends import BackendClient, ChatChunk, ChatResult, Timeouts, Usage
from agentgate.dispatch.dispatcher import Dispatcher, model_slos
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
from agentgate.dispatch.metrics import EngineLoad, load_from_text
from agentgate.dispatch.prefix import block_hashes, estimate_tokens, prompt_text
from agentgate.dispatch.quota import TenantQuota
from agentgate.dispatch.router import Router
from agentgate.dispatch.state import SpeedModel

__all__ = [
    "GPU",
    "AllowedBackend",
    "Backend",
    "BackendClient",
    "BackendCost",
    "Candidate",
    "ChatChunk",
    "ChatResult",
    "Dispatcher",
    "EngineLoad",
    "Interconnect",
    "Inventory",
    "Node",
    "Rack",
    "RoutePlan",
    "RouteRequest",
    "Router",
    "RoutingPolicy",
    "SpeedModel",
    "TenantQuota",
    "Timeouts",
    "Usage",
    "block_hashes",
    "estimate_tokens",
    "inventory_from_mapping",
    "load_from_text",
    "load_inventory",
    "model_slos",
    "parse_inventory",
    "prompt_text",
]
