"""Model-call dispatch: the GPU inventory, backend clients, the router and the dispatcher."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentgate._lazy import lazy_exports

if TYPE_CHECKING:  # the names, for type checkers; at run time each is imported on first use
    from agentgate.dispatch._answers import ChatChunk, ChatResult, Usage
    from agentgate.dispatch._engine_fields import FieldError
    from agentgate.dispatch._policy import AllowedBackend, Candidate, RoutePlan, RouteRequest, RoutingPolicy
    from agentgate.dispatch.backends import BackendClient, Timeouts
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
    from agentgate.dispatch.prefix import block_hashes, estimate_prompt_tokens, estimate_tokens, prompt_text
    from agentgate.dispatch.quota import TenantQuota
    from agentgate.dispatch.router import Router
    from agentgate.dispatch.state import SpeedModel

# The dispatcher brings aiohttp, httpx, OpenTelemetry and Prometheus; the store's broker tables and
# the CLI need only the broker's value types: each name is imported from its module on first use,
# the answer types (ChatChunk, ChatResult, Usage) from _answers, which imports no HTTP client.
_EXPORTS: dict[str, str] = {
    "AllowedBackend": "agentgate.dispatch._policy",
    "Backend": "agentgate.dispatch.inventory",
    "BackendClient": "agentgate.dispatch.backends",
    "BackendCost": "agentgate.dispatch.inventory",
    "Candidate": "agentgate.dispatch._policy",
    "ChatChunk": "agentgate.dispatch._answers",
    "ChatResult": "agentgate.dispatch._answers",
    "Dispatcher": "agentgate.dispatch.dispatcher",
    "EngineLoad": "agentgate.dispatch.metrics",
    "FieldError": "agentgate.dispatch._engine_fields",
    "GPU": "agentgate.dispatch.inventory",
    "Interconnect": "agentgate.dispatch.inventory",
    "Inventory": "agentgate.dispatch.inventory",
    "Node": "agentgate.dispatch.inventory",
    "Rack": "agentgate.dispatch.inventory",
    "RoutePlan": "agentgate.dispatch._policy",
    "RouteRequest": "agentgate.dispatch._policy",
    "Router": "agentgate.dispatch.router",
    "RoutingPolicy": "agentgate.dispatch._policy",
    "SpeedModel": "agentgate.dispatch.state",
    "TenantQuota": "agentgate.dispatch.quota",
    "Timeouts": "agentgate.dispatch.backends",
    "Usage": "agentgate.dispatch._answers",
    "block_hashes": "agentgate.dispatch.prefix",
    "estimate_prompt_tokens": "agentgate.dispatch.prefix",
    "estimate_tokens": "agentgate.dispatch.prefix",
    "inventory_from_mapping": "agentgate.dispatch.inventory",
    "load_from_text": "agentgate.dispatch.metrics",
    "load_inventory": "agentgate.dispatch.inventory",
    "model_slos": "agentgate.dispatch.dispatcher",
    "parse_inventory": "agentgate.dispatch.inventory",
    "prompt_text": "agentgate.dispatch.prefix",
}


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


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
    "FieldError",
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
    "estimate_prompt_tokens",
    "estimate_tokens",
    "inventory_from_mapping",
    "load_from_text",
    "load_inventory",
    "model_slos",
    "parse_inventory",
    "prompt_text",
]
