"""Review R67: engine fields that reach another request, or another model, past the decision.

vLLM's ``vllm_xargs`` is copied whole into a request's ``SamplingParams.extra_args``, which is
where vLLM's scheduler reads a request's ``kv_transfer_params`` from (its own top-level field is
merged into the same dict): ``vllm_xargs: {"kv_transfer_params": ...}`` pulled another engine's
KV blocks past the R66 refusal of ``kv_transfer_params``, and it hands any other key to whatever
extension the operator installed. SGLang's ``rid`` and vLLM's ``request_id`` name the request
inside the engine, where an id is looked up to abort a request, to stream its output and (SGLang)
to refuse a second one: a caller that picks one collides with, or stands for, another caller's
request of that id. All three are refused unless null. Model names are not: an adapter reached
as SGLang's ``base:adapter`` is a model of its own, routed only where the inventory lists that
exact name (pinned below). Over real HTTP on 127.0.0.1, with the counting hostile backend of
``test_gateway_r66_output_limit_fields``."""

from __future__ import annotations

from typing import Any

import pytest
import test_gateway_r66_output_limit_fields
from test_dispatch_r61_backend_garbage import PAYLOAD, Garbage, dispatcher_of
from test_gateway_end_to_end import _body
from test_gateway_hostile_backends import Env, _in_service
from test_gateway_r66_output_limit_fields import _Counting

from agentgate.capabilities import Call, pattern_matches
from agentgate.errors import NoBackend

STEERING = [
    ("vllm_xargs", {"kv_transfer_params": {"do_remote_prefill": True, "remote_block_ids": [1, 2]}}),
    ("vllm_xargs", {}),
    ("rid", "chatcmpl-of-another-caller"),
    ("request_id", "chatcmpl-of-another-caller"),
]

counting = test_gateway_r66_output_limit_fields.counting  # the fixtures, shared: a module's own instances
env = test_gateway_r66_output_limit_fields.env


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("name", "value"), STEERING)
def test_a_field_that_reaches_another_request_is_refused_before_it_is_decided(
    env: Env, counting: _Counting, name: str, value: Any, stream: bool
) -> None:
    """Review R67: each was passed on to the backend (``vllm_xargs`` carrying the
    ``kv_transfer_params`` refused on its own since R66). Refused 400 naming the field: nothing
    decided, sent, reserved or charged."""
    _in_service(env)
    spent, count, asked = env.spent(), len(env.outcomes()), counting.asked
    answer = env.post({**_body(stream=stream), name: value})
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == name and error["code"] == "invalid_request", error
    assert f"'{name}'" in error["message"], error
    assert counting.asked == asked, "the call was sent to the backend"
    assert env.spent() == spent and env.held() == []
    assert len(env.outcomes()) == count


@pytest.mark.parametrize("name", sorted({name for name, _ in STEERING}))
def test_the_field_null_is_the_field_absent(env: Env, counting: _Counting, name: str) -> None:
    """Review R67, the rule's other side: null is what every engine reads as the field left out."""
    _in_service(env)
    asked = counting.asked
    answer = env.post({**_body(), name: None})
    assert answer.status_code == 200, answer.text
    assert counting.asked == asked + 1


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
