"""Review R86: a chat body holding a value JSON cannot write (a ``Decimal`` temperature, a
metadata list nested 5,000 deep, a set) passed ``Dispatcher.route_request``; the backend client's
encoder then raised a bare ``TypeError`` or ``RecursionError``, after the router had dispatched
the call and debited its tenant. Now ``route_request`` refuses it with a ``FieldError`` (an
``InputError``) naming the field, before the call is routed or its tenant debited."""

from __future__ import annotations

import asyncio
import decimal
from typing import Any

import pytest

from agentgate.dispatch import Dispatcher, inventory_from_mapping
from agentgate.dispatch._engine_fields import FieldError
from agentgate.dispatch.quota import TenantQuota
from agentgate.dispatch.router import Router

INVENTORY = inventory_from_mapping(
    {"backends": [{"name": "b", "url": "http://127.0.0.1:9", "models": ["m"]}]}
)
PAYLOAD = {"model": "m", "messages": [{"role": "user", "content": "secret prompt"}], "max_tokens": 100}


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


UNWRITABLE: dict[str, tuple[str, Any, str]] = {
    "decimal": ("temperature", decimal.Decimal("0.7"), "Decimal is not JSON serializable"),
    "deep": ("metadata", _nested(5000), "nested too deeply"),
    "set": ("stop", {"a"}, "set is not JSON serializable"),
}


async def _refused(verb: str, name: str, value: Any) -> tuple[FieldError, Router]:
    router = Router(INVENTORY, quotas={"t": TenantQuota(rate_tokens_per_s=1e-9, burst_tokens=1000)})
    async with Dispatcher(INVENTORY, router, max_attempts=1, recovery_wait_s=0) as dispatcher:
        with pytest.raises(FieldError) as caught:
            if verb == "chat":
                await dispatcher.chat({**PAYLOAD, name: value}, tenant="t")
            else:
                async for _ in dispatcher.stream({**PAYLOAD, name: value, "stream": True}, tenant="t"):
                    pass
    return caught.value, router


@pytest.mark.parametrize("verb", ["chat", "stream"])
@pytest.mark.parametrize("case", sorted(UNWRITABLE))
def test_a_body_value_json_cannot_write_is_refused_naming_its_field_before_any_debit(
    verb: str, case: str
) -> None:
    name, value, reason = UNWRITABLE[case]
    error, router = asyncio.run(_refused(verb, name, value))
    assert error.param == name
    assert f"body field '{name}' cannot be written as JSON" in str(error) and reason in str(error)
    assert "secret prompt" not in str(error)
    assert "t" not in router._buckets  # never routed: its tenant's bucket was never touched
    assert router.states["b"].in_flight == 0


def test_a_body_orjson_refuses_but_json_writes_is_still_taken() -> None:
    router = Router(INVENTORY)
    dispatcher = Dispatcher(INVENTORY, router)
    request = dispatcher.route_request({**PAYLOAD, "seed": 2**70})  # beyond orjson's 64 bits
    assert request.max_output_tokens == 100
