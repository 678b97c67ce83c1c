"""Regression review of R91: when the router reads a waiting call's ``allowed`` was not said.

Review R91 reads a call's ``allowed`` when the call asks and keeps it in the queues of the
backends it admitted then, where the router before it read the predicate again at every walk down
the line (a cost that grew with the line). A predicate whose answer changes while the call waits
(``AllowedBackend`` stands for a grant and a tenant quota) thus counts from the call's next ask,
which neither the docstrings nor docs/dispatch.md said. They say it now.

Rules: a waiting call keeps the backends its ``allowed`` admitted at its last ask until it asks
again; and ``Router.route``, ``AllowedBackend`` and docs/dispatch.md say so.
"""

from __future__ import annotations

import re
from pathlib import Path

import agentgate.dispatch._policy as policy_module
from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.inventory import Backend
from agentgate.dispatch.router import Router, RouteRequest

DOCS = Path(__file__).resolve().parents[1] / "docs" / "dispatch.md"
SAID = re.compile(r"read\s+each\s+time\s+the\s+(request|call)\s+asks", re.IGNORECASE)


def _call(name: str, arrived: float) -> RouteRequest:
    return RouteRequest(id=name, model="m", prompt_tokens=10, slo_ttft_s=100.0, arrived_at=arrived)


def test_a_grant_narrowed_while_a_call_waits_counts_from_its_next_ask() -> None:
    router = Router(
        inventory_from_mapping(
            {
                "backends": [
                    {"name": "a", "url": "http://127.0.0.1:9000", "models": ["m"], "max_concurrency": 1},
                    {"name": "b", "url": "http://127.0.0.1:9001", "models": ["m"], "max_concurrency": 1},
                ]
            }
        )
    )
    grant = {"a", "b"}

    def allowed(backend: Backend) -> bool:
        return backend.name in grant

    assert router.route(_call("Ha", 0.0), 0.0, lambda backend: backend.name == "a").backend == "a"
    assert router.route(_call("Hb", 0.0), 0.0, lambda backend: backend.name == "b").backend == "b"
    assert router.route(_call("W", 0.1), 0.1, allowed).action == "wait"
    grant.discard("a")  # W's grant narrowed while it waits
    router.finished("Ha", 0.2)
    assert router.due(0.2) == ["W"]  # by what its grant admitted when it last asked
    assert router.route(_call("X", 0.3), 0.3).action == "wait"  # the slot is W's until W asks
    assert router.route(_call("W", 0.1), 0.35, allowed).action == "wait"  # asks: b is full
    assert router.due(0.4) == ["X"]
    assert router.route(_call("X", 0.3), 0.4).backend == "a"


def test_route_allowed_backend_and_the_docs_say_when_allowed_is_read() -> None:
    route_doc = Router.route.__doc__ or ""
    policy_source = Path(policy_module.__file__).read_text(encoding="utf-8")
    allowed_doc = policy_source.split("AllowedBackend = ", 1)[1].split("\n\n", 1)[0]
    docs = DOCS.read_text(encoding="utf-8")
    for where, text in (("Router.route", route_doc), ("AllowedBackend", allowed_doc), ("docs", docs)):
        assert SAID.search(text), f"{where} does not say when allowed is read"
