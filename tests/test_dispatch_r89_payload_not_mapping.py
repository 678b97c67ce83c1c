"""Review R89: ``Dispatcher.chat`` and ``stream`` given a payload that is not a mapping (``None``,
a list, text: a JSON body that is no object) failed with a bare ``AttributeError`` ("'NoneType'
object has no attribute 'get'") out of ``route_request``. It is now the ``DispatchError`` a
payload without a model or messages gets, saying what the payload was, before anything is routed."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agentgate.dispatch import Dispatcher, inventory_from_mapping
from agentgate.dispatch.quota import TenantQuota
from agentgate.dispatch.router import Router
from agentgate.errors import DispatchError

INVENTORY = inventory_from_mapping(
    {"backends": [{"name": "b", "url": "http://127.0.0.1:9", "models": ["m"]}]}
)
NOT_A_MAPPING: list[tuple[Any, str]] = [
    (None, "None"),
    ([{"model": "m", "messages": [{"role": "user", "content": "hi"}]}], "a list"),
    ("m", "a str"),
    (b"{}", "a bytes"),
]


async def _refused(verb: str, payload: Any) -> tuple[DispatchError, Router]:
    router = Router(INVENTORY, quotas={"t": TenantQuota(rate_tokens_per_s=1.0, burst_tokens=1000)})
    async with Dispatcher(INVENTORY, router, max_attempts=1, recovery_wait_s=0) as dispatcher:
        with pytest.raises(DispatchError) as caught:
            if verb == "chat":
                await dispatcher.chat(payload, tenant="t")
            else:
                async for _ in dispatcher.stream(payload, tenant="t"):
                    pass
    return caught.value, router


@pytest.mark.parametrize("verb", ["chat", "stream"])
@pytest.mark.parametrize(("payload", "shown"), NOT_A_MAPPING, ids=[s for _, s in NOT_A_MAPPING])
def test_a_payload_that_is_not_a_mapping_is_a_dispatch_error_before_routing(
    verb: str, payload: Any, shown: str
) -> None:
    error, router = asyncio.run(_refused(verb, payload))
    assert str(error) == (
        "a chat call needs a model name and a non-empty list of messages: "
        f"its payload is {shown}, not a mapping"
    )
    assert "t" not in router._buckets  # never routed
