"""A waiter dropped from the line for not asking for ``WAITER_TIMEOUT_S`` is queued anew at its
arrival's place when it asks again: ahead of a later arrival, even one that kept asking. Until a
second regression review of R91 the router's docstring and docs/dispatch.md said it came back
"behind those that kept asking", which the router never did."""

from __future__ import annotations

from pathlib import Path

import agentgate.dispatch.router as router_module
from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.router import Router, RouteRequest

DOCS = Path(__file__).resolve().parents[1] / "docs" / "dispatch.md"


def _call(name: str, arrived_at: float) -> RouteRequest:
    return RouteRequest(id=name, model="m", prompt_tokens=10, slo_ttft_s=100.0, arrived_at=arrived_at)


def test_a_waiter_dropped_for_silence_is_queued_anew_at_its_arrivals_place() -> None:
    inventory = inventory_from_mapping(
        {"backends": [{"name": "b0", "url": "http://127.0.0.1:9000", "models": ["m"], "max_concurrency": 1}]}
    )
    router = Router(inventory)
    assert router.route(_call("A", 0.0), 0.0).action == "dispatch"
    assert router.route(_call("W1", 0.0), 0.0).action == "wait"  # arrived first, then stops asking
    assert router.route(_call("W2", 0.5), 0.5).action == "wait"
    for now in (1.0, 1.5, 2.0, 2.5):
        assert router.route(_call("W2", 0.5), now).action == "wait"  # keeps asking
    router.finished("A", 2.6)
    assert router.due(2.6) == ["W2"]  # W1 was dropped from the line
    # Asking again, W1 is queued by its arrival, ahead of W2, and takes the slot.
    assert router.route(_call("W1", 0.0), 2.7).backend == "b0"
    assert router.route(_call("W2", 0.5), 2.7).action == "wait"


def test_the_docs_say_it_is_queued_at_its_arrivals_place() -> None:
    docstring = " ".join((router_module.__doc__ or "").split())
    docs = " ".join(DOCS.read_text(encoding="utf-8").split())
    assert "queued anew at its arrival's place" in docstring
    assert "queued anew at its arrival's place" in docs
    assert "queued anew, behind those that kept asking" not in docstring
    assert "queued anew, behind those that kept asking" not in docs
