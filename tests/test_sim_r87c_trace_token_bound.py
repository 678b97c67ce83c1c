"""Regression review (round c) of R87: ``replay`` took a trace request of ``10**400`` prompt
tokens, and ``PolicyDispatcher`` over ``Router`` or any baseline router ended the replay with a
bare ``OverflowError`` (a sum with a float). Token counts above 2**53, the most a float holds
exactly, are now refused by the replay's request check with ``InputError`` naming the request and
the field, before anything is replayed (agentgate/sim/_des.py).
"""

from __future__ import annotations

import dataclasses

import pytest
from test_sim_r87_request_fields import _GOOD

from agentgate.dispatch import baselines, inventory_from_mapping
from agentgate.dispatch.router import Router
from agentgate.errors import InputError
from agentgate.sim import LLAMA_8B_H100, Engine, EngineConfig, replay
from agentgate.sim.routing import PolicyDispatcher
from agentgate.sim.traces import TraceRequest

_INVENTORY = inventory_from_mapping(
    {"backends": [{"name": "b", "url": "http://b", "models": ["m"], "kv_capacity_tokens": 900_000}]}
)


def _replay(request: TraceRequest, router: object) -> None:
    engines = {"b": Engine(LLAMA_8B_H100, EngineConfig(block_tokens=16))}
    replay([_GOOD, request], engines, PolicyDispatcher(router, "m"))  # type: ignore[arg-type]


@pytest.mark.parametrize("field", ["prompt_tokens", "output_tokens", "block_tokens"])
@pytest.mark.parametrize(
    "router",
    [lambda: Router(_INVENTORY, block_tokens=16), lambda: baselines.LeastBusyRouter(_INVENTORY)],
    ids=["Router", "LeastBusyRouter"],
)
def test_a_token_count_too_large_for_a_float_is_refused(field: str, router: object) -> None:
    huge = dataclasses.replace(_GOOD, id="x", arrival=0.1, **{field: 10**400})
    with pytest.raises(InputError) as refused:
        _replay(huge, router())  # type: ignore[operator]
    assert str(refused.value) == (
        f"request 'x': {field} must be at most 2**53 (9,007,199,254,740,992) tokens, not an integer of 1329 bits"
    )


def test_a_prompt_of_2_to_the_53_tokens_is_replayed_as_the_engine_rejects_it() -> None:
    large = dataclasses.replace(_GOOD, id="x", arrival=0.1, prompt_tokens=2**53)
    engines = {"b": Engine(LLAMA_8B_H100, EngineConfig(block_tokens=16))}
    outcomes = replay([_GOOD, large], engines, PolicyDispatcher(Router(_INVENTORY, block_tokens=16), "m"))
    assert outcomes[1].rejected is not None
