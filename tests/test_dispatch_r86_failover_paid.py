"""Review R86: a call failed over is judged by its tenant's balance without what its first
dispatch took (``RoutePlan.debited``, which the floor at ``-burst`` may clip below its cost). The
dispatcher hands that back with the call it routes again (``RouteRequest.paid``), on the whole
answer and the streamed path alike; the router keeps no record of it (until the round's reading
it kept one per call in a map of 100,000, left behind by every call that failed for good)."""

from __future__ import annotations

import socket

import pytest

from agentgate.dispatch import Dispatcher, Router, inventory_from_mapping
from agentgate.dispatch.quota import TenantQuota
from agentgate.dispatch.router import RoutePlan, RouteRequest
from agentgate.errors import BackendFailed

MODEL = "m"


def _dead_url() -> str:
    """A loopback port nothing listens on: every call to it fails before any output."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


class _Recording(Router):
    """A router that keeps each request it is asked to route and the plan it gave."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.asked: list[tuple[RouteRequest, RoutePlan]] = []

    def route(self, request: RouteRequest, now: float, *args: object, **kwargs: object) -> RoutePlan:
        plan = super().route(request, now, *args, **kwargs)  # type: ignore[arg-type]
        self.asked.append((request, plan))
        return plan


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
async def test_a_call_failed_over_carries_what_its_first_dispatch_took(streamed: bool) -> None:
    inventory = inventory_from_mapping(
        {"backends": [{"name": f"dead{i}", "url": _dead_url(), "models": [MODEL]} for i in range(2)]}
    )
    # Burst 1000, the call costs 4 + 2000: its debit is clipped at -1000, taking 1000.
    router = _Recording(inventory, quotas={"t": TenantQuota(rate_tokens_per_s=1e-6, burst_tokens=1000)})
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2000}
    async with Dispatcher(inventory, router, max_attempts=2) as dispatcher:
        with pytest.raises(BackendFailed):
            if streamed:
                async for _ in dispatcher.stream(body, tenant="t"):
                    pass
            else:
                await dispatcher.chat(body, tenant="t")
    dispatched = [(r, p) for r, p in router.asked if p.action == "dispatch"]
    assert len(dispatched) == 2
    (first, plan), (again, plan_again) = dispatched
    assert not first.failover and first.paid == 0.0
    assert 0 < plan.debited < first.prompt_tokens + first.max_output_tokens  # clipped at the floor
    assert again.failover and again.paid == plan.debited
    assert plan_again.debited == 0.0  # not debited again
