"""The router's cost tie-break (agentgate/dispatch/router.py): between equally fast backends, a
request goes where its prompt and its output limit, each priced at its own rate, cost least.
(The router's other rules are in tests/test_dispatch_router*.py and tests/test_router_order.py.)"""

from __future__ import annotations

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.router import Router, RouteRequest
from agentgate.sim import chain_hashes


def test_the_cost_tie_break_prices_the_prompt_and_the_output_limit_each_at_its_own_rate() -> None:
    # Kills: _price counting only the prompt (input_per_mtok) or only the output limit
    # (output_per_mtok), keeping the dearest near-ties, or no cost tie-break at all. Two idle,
    # equally fast backends, one cheap on input and one cheap on output: a long prompt with a
    # short answer belongs on the first, a short prompt with a long output limit on the second.
    inventory = inventory_from_mapping(
        {
            "backends": [
                {
                    "name": "cheap-out",
                    "url": "http://127.0.0.1:9001",
                    "models": ["m"],
                    "cost": {"input_per_mtok": 1_000_000, "output_per_mtok": 100_000},
                },
                {
                    "name": "cheap-in",
                    "url": "http://127.0.0.1:9002",
                    "models": ["m"],
                    "cost": {"input_per_mtok": 100_000, "output_per_mtok": 1_000_000},
                },
            ]
        }
    )
    router = Router(inventory, seed=3)
    chosen: list[tuple[str, str]] = []
    for i in range(8):
        for kind, prompt, output in (("long prompt", 4000, 10), ("long output", 16, 4000)):
            request = RouteRequest(
                id=f"{kind}-{i}",
                model="m",
                prompt_tokens=prompt,
                max_output_tokens=output,
                prefix_hashes=chain_hashes((kind, i, b) for b in range(prompt // 16)),
                slo_ttft_s=30.0,
            )
            plan = router.route(request, float(i))
            chosen.append((kind, plan.backend))
            router.first_token(request.id, i + 0.1)
            router.finished(request.id, i + 0.2)
    assert set(chosen) == {("long prompt", "cheap-in"), ("long output", "cheap-out")}, chosen
