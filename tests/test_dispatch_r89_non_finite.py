"""Review R89: a NaN or an infinity in a chat body given from Python (``Dispatcher.chat`` and
``stream``, and so ``Gate.dispatch``) was sent as ``null``: orjson writes them so. A
``temperature`` of NaN reached the engine as its default, a ``top_p`` of infinity too, and a
``logit_bias`` of -inf as none, all without a word. Each is now refused, as any value JSON cannot
write is (review R86), with a ``FieldError`` naming its field, before the call is routed or its
tenant debited; the backend client refuses it too, before anything is sent."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import _http
import pytest

from agentgate.dispatch import Dispatcher, inventory_from_mapping
from agentgate.dispatch._engine_fields import FieldError
from agentgate.dispatch.backends import BackendClient
from agentgate.dispatch.quota import TenantQuota
from agentgate.dispatch.router import Router

INVENTORY = inventory_from_mapping(
    {"backends": [{"name": "b", "url": "http://127.0.0.1:9", "models": ["m"]}]}
)
PAYLOAD = {"model": "m", "messages": [{"role": "user", "content": "secret prompt"}], "max_tokens": 100}

NOT_FINITE: dict[str, dict[str, Any]] = {
    "nan-temperature": {"temperature": math.nan},
    "infinite-top-p": {"top_p": math.inf},
    "minus-infinity-logit-bias": {"logit_bias": {"50256": -math.inf}},
    "nan-in-a-list": {"metadata": {"weights": [0.5, (1.0, math.nan)]}},
    # An integer beyond 64 bits is written by Python's json (orjson refuses it): the NaN beside
    # it is refused there too, where json wrote it as ``NaN``, which is no JSON.
    "nan-beside-a-huge-integer": {"seed": 2**70, "temperature": math.nan},
}
FIELD = {case: next(name for name in body if name != "seed") for case, body in NOT_FINITE.items()}


async def _refused(verb: str, body: dict[str, Any]) -> tuple[FieldError, Router]:
    router = Router(INVENTORY, quotas={"t": TenantQuota(rate_tokens_per_s=1e-9, burst_tokens=1000)})
    async with Dispatcher(INVENTORY, router, max_attempts=1, recovery_wait_s=0) as dispatcher:
        with pytest.raises(FieldError) as caught:
            if verb == "chat":
                await dispatcher.chat({**PAYLOAD, **body}, tenant="t")
            else:
                async for _ in dispatcher.stream({**PAYLOAD, **body}, tenant="t"):
                    pass
    return caught.value, router


@pytest.mark.parametrize("verb", ["chat", "stream"])
@pytest.mark.parametrize("case", sorted(NOT_FINITE))
def test_a_nan_or_infinity_in_the_body_is_refused_naming_its_field_before_any_debit(
    verb: str, case: str
) -> None:
    error, router = asyncio.run(_refused(verb, NOT_FINITE[case]))
    assert error.param == FIELD[case]
    assert f"body field '{FIELD[case]}' cannot be written as JSON" in str(error)
    assert "secret prompt" not in str(error)
    assert "t" not in router._buckets  # never routed: its tenant's bucket was never touched
    assert router.states["b"].in_flight == 0


@pytest.mark.parametrize("case", sorted(NOT_FINITE))
async def test_the_backend_client_sends_no_body_holding_a_nan_or_infinity(case: str) -> None:
    async with _http.AsyncClient() as http:
        client = BackendClient(INVENTORY.backends[0], http)
        with pytest.raises(FieldError) as caught:
            await client.chat({**PAYLOAD, **NOT_FINITE[case]})
    assert caught.value.param == FIELD[case]


def test_finite_floats_and_nulls_are_written_as_they_are() -> None:
    dispatcher = Dispatcher(INVENTORY, Router(INVENTORY))
    body = {**PAYLOAD, "temperature": 0.7, "top_p": None, "logit_bias": {"50256": -100.0}}
    assert dispatcher.route_request(body).max_output_tokens == 100
