"""Review R82: ``Dispatcher.chat`` and ``stream`` checked a call's ``tenant`` and ``session``
(review R57) but handed its ``priority`` and ``slo_ttft_s`` to the router unchecked: text or
``None`` failed with an untyped ``TypeError`` deep in the router where the SLO could not be met,
and passed where it could; a negative SLO, a priority of 1.5 or ``True`` was taken. Now
``route_request`` refuses them with an ``InputError`` naming the argument, before any backend is
asked: a priority is a whole number >= 0 (a priority class's ``rank``, 0 first; a bool is
none), an SLO ``None`` (the model's or the dispatcher's) or positive and finite, as the
dispatcher's own ``slo_ttft_s`` is (``Dispatcher(slo_ttft_s="2")`` is an ``InputError`` too, no
longer a ``TypeError``)."""

from __future__ import annotations

import asyncio
import math

import pytest
from test_gate_dispatch_tenants import PAYLOAD, _collect

from agentgate.dispatch import Dispatcher, inventory_from_mapping
from agentgate.dispatch.router import Router
from agentgate.errors import InputError

INVENTORY = inventory_from_mapping(
    {"backends": [{"name": "b", "url": "http://127.0.0.1:9", "engine": "vllm", "models": ["m"]}]}
)


@pytest.mark.parametrize("verb", ["chat", "stream"])
@pytest.mark.parametrize(
    ("route", "said"),
    [
        pytest.param({"priority": "0"}, "priority must be a whole number >= 0", id="priority-text"),
        pytest.param({"priority": None}, "priority must be a whole number >= 0", id="priority-none"),
        pytest.param({"priority": 1.5}, "priority must be a whole number >= 0", id="priority-float"),
        pytest.param({"priority": True}, "priority must be a whole number >= 0", id="priority-bool"),
        pytest.param({"priority": -1}, "priority must be a whole number >= 0", id="priority-negative"),
        pytest.param({"slo_ttft_s": "2"}, "slo_ttft_s must be positive and finite", id="slo-text"),
        pytest.param({"slo_ttft_s": -1.0}, "slo_ttft_s must be positive and finite", id="slo-negative"),
        pytest.param({"slo_ttft_s": 0}, "slo_ttft_s must be positive and finite", id="slo-zero"),
        pytest.param({"slo_ttft_s": math.nan}, "slo_ttft_s must be positive and finite", id="slo-nan"),
        pytest.param({"slo_ttft_s": math.inf}, "slo_ttft_s must be positive and finite", id="slo-inf"),
        pytest.param({"slo_ttft_s": True}, "slo_ttft_s must be positive and finite", id="slo-bool"),
    ],
)
def test_a_dispatcher_called_directly_refuses_a_priority_or_slo_out_of_range(
    verb: str, route: dict[str, object], said: str
) -> None:
    async def call() -> None:
        async with Dispatcher(INVENTORY, Router(INVENTORY)) as dispatcher:
            if verb == "chat":
                await dispatcher.chat(PAYLOAD, **route)
            else:
                await _collect(dispatcher.stream(PAYLOAD, **route))

    with pytest.raises(InputError, match=said):
        asyncio.run(call())


@pytest.mark.parametrize(
    ("priority", "slo_ttft_s", "routed_slo"),
    [(0, None, 2.0), (1, 0.5, 0.5), (7, 3, 3)],
)
def test_a_priority_and_slo_in_range_are_routed_as_given(
    priority: int, slo_ttft_s: float | None, routed_slo: float
) -> None:
    dispatcher = Dispatcher(INVENTORY, Router(INVENTORY))
    request = dispatcher.route_request(PAYLOAD, priority=priority, slo_ttft_s=slo_ttft_s)
    assert (request.priority, request.slo_ttft_s) == (priority, routed_slo)


def test_a_dispatcher_slo_that_is_text_is_an_input_error_when_it_is_made() -> None:
    with pytest.raises(InputError, match="dispatcher slo_ttft_s must be positive and finite"):
        Dispatcher(INVENTORY, Router(INVENTORY), slo_ttft_s="2")  # type: ignore[arg-type]
