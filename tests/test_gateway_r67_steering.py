"""Review R67: engine fields that reach another request, or another model, past the decision.

vLLM's ``vllm_xargs`` is copied whole into a request's ``SamplingParams.extra_args``, which is
where vLLM's scheduler reads a request's ``kv_transfer_params`` from (its own top-level field is
merged into the same dict): ``vllm_xargs: {"kv_transfer_params": ...}`` pulled another engine's
KV blocks past the R66 refusal of ``kv_transfer_params``, and it hands any other key to whatever
extension the operator installed. SGLang's ``rid`` and vLLM's ``request_id`` name the request
inside the engine, where an id is looked up to abort a request, to stream its output and (SGLang)
to refuse a second one: a caller that picks one collides with, or stands for, another caller's
request of that id. All three are refused unless null: their cases are in
``test_gateway_r66_engine_state_fields.STEERING``, run by its tests (each failed on the code
before this round: 200, not 400). Model names are not refused: an adapter reached as SGLang's
``base:adapter`` is a model of its own, routed only where the inventory lists that exact name
(pinned below)."""

from __future__ import annotations

import pytest
from test_dispatch_r61_backend_garbage import PAYLOAD, Garbage, dispatcher_of

from agentgate.capabilities import Call, pattern_matches
from agentgate.errors import NoBackend


async def test_an_adapter_name_is_routed_only_where_the_inventory_lists_it() -> None:
    """Review R67, found sound and pinned: a grant's ``model:small.*`` names
    ``model:small.v2:evil-adapter`` (``:`` joins a model name's segments), but a call to it goes
    only to a backend that lists that exact name, never to one serving ``small.v2`` (which, under
    SGLang, would run ``evil-adapter`` on it): ``NoBackend``, nothing sent."""
    assert pattern_matches("model:small.*", Call.model("small.v2:evil-adapter").resource)
    garbage = Garbage()
    try:
        async with dispatcher_of(garbage.url) as (dispatcher, _):
            with pytest.raises(NoBackend):
                await dispatcher.chat({**PAYLOAD, "model": "small:evil-adapter"})
    finally:
        garbage.close()
    assert garbage.asked == 0
