"""Review R84: ``Dispatcher.chat`` and ``stream`` (so ``Gate.dispatch``) debit a tenant's token
bucket prompt + max output tokens once per call, for one answer, but passed on ``n: 20`` (twenty
answers generated, one debited), ``best_of``, llama.cpp's ``n_cmpl`` and its ``n_predict`` output
limit, which the gateway refuses. Now the dispatcher refuses what the gateway refuses, from one
definition (``agentgate.dispatch._engine_fields``): those, and every engine field that picks what
the call was not decided on (``lora``, ``id_slot``, ``input_ids``, ``chat_template``, ...), each a
``FieldError`` naming the field before the call is routed or its tenant debited."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from agentgate.dispatch import Dispatcher, inventory_from_mapping
from agentgate.dispatch._engine_fields import ONE_CHOICE, OTHER_LIMITS, STEERING, FieldError
from agentgate.dispatch.gateway._request import _parse_body
from agentgate.dispatch.quota import TenantQuota
from agentgate.dispatch.router import Router
from agentgate.errors import InputError

INVENTORY = inventory_from_mapping(
    {"backends": [{"name": "b", "url": "http://127.0.0.1:9", "engine": "llamacpp", "models": ["m"]}]}
)
PAYLOAD = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 100}

REFUSED: dict[str, dict[str, Any]] = {
    **{f"{name}-20": {name: 20} for name in ONE_CHOICE},
    "n-true": {"n": True},
    **{f"{name}-null": {name: None} for name in OTHER_LIMITS},
    **{name: {name: 1} for name in STEERING},
    "lora-empty": {"lora": []},
    "template-kwargs-tokenize": {"chat_template_kwargs": {"tokenize": True}},
    "template-kwargs-text": {"chat_template_kwargs": "x"},
}


async def _refused(verb: str, fields: dict[str, Any]) -> tuple[FieldError, Router]:
    router = Router(INVENTORY, quotas={"t": TenantQuota(rate_tokens_per_s=1e-9, burst_tokens=1000)})
    async with Dispatcher(INVENTORY, router, max_attempts=1, recovery_wait_s=0) as dispatcher:
        with pytest.raises(FieldError) as caught:
            if verb == "chat":
                await dispatcher.chat({**PAYLOAD, **fields}, tenant="t")
            else:
                async for _ in dispatcher.stream({**PAYLOAD, **fields, "stream": True}, tenant="t"):
                    pass
    return caught.value, router


@pytest.mark.parametrize("verb", ["chat", "stream"])
@pytest.mark.parametrize("case", sorted(REFUSED))
def test_a_field_the_gateway_refuses_is_refused_by_the_dispatcher_before_any_debit(
    verb: str, case: str
) -> None:
    fields = REFUSED[case]
    error, router = asyncio.run(_refused(verb, fields))
    (name,) = fields
    assert isinstance(error, InputError) and error.param == name and f"'{name}'" in str(error)
    assert "t" not in router._buckets  # never routed: its tenant's bucket was never touched
    assert router.states["b"].in_flight == 0


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_the_gateway_refuses_the_same_field_with_the_same_words(case: str) -> None:
    fields = REFUSED[case]
    with pytest.raises(FieldError) as at_gateway:
        _parse_body(json.dumps({**PAYLOAD, **fields}).encode())
    error, _ = asyncio.run(_refused("chat", fields))
    assert (at_gateway.value.param, str(at_gateway.value)) == (error.param, str(error))


@pytest.mark.parametrize(
    "fields",
    [
        {},
        {"n": 1},
        {"n": None},
        {"best_of": 1.0},
        {"lora": None},
        {"chat_template_kwargs": {"enable_thinking": True}},
    ],
)
def test_one_choice_and_fields_left_null_are_routed_for_one_answer(fields: dict[str, Any]) -> None:
    dispatcher = Dispatcher(INVENTORY, Router(INVENTORY))
    request = dispatcher.route_request({**PAYLOAD, **fields})
    assert request.max_output_tokens == 100
