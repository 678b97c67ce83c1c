"""Gate.dispatch / dispatch_stream (a Gate with a Dispatcher attached): a dispatched call is routed
under its caller's tenant (its token quota spent and, when over it under saturation, shed) and
keeps its session's backend. Real simulated vLLM backends on loopback HTTP."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from test_gate_run import _until

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.dispatcher import Dispatcher
from agentgate.dispatch.quota import TenantQuota
from agentgate.dispatch.router import Router
from agentgate.errors import Shed
from agentgate.gate import Gate
from agentgate.sim import SimServer

_STREAM_POLICY = """
version: 1
tools:
  search.web: {}
"""

PAYLOAD = {"model": "llama-3.1-8b", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 12}


def test_a_streamed_call_is_charged_and_shed_under_its_callers_tenant(tmp_path: Path) -> None:
    """Mutant d3: ``Gate.dispatch_stream`` forwarded tenant "default" to the dispatcher whatever
    the caller named. Rule: a streamed call is routed under its caller's tenant: it spends that
    tenant's token bucket, and once the bucket is spent, with the backend saturated, that tenant's
    next streamed call is shed for its quota while another tenant's waits and is served."""
    server = SimServer(time_scale=1.0).start()  # real time: a 2,000-token answer holds its slot
    try:
        inventory = inventory_from_mapping(
            {
                "backends": [
                    {
                        "name": "b0",
                        "url": server.url,
                        "engine": "vllm",
                        "models": ["llama-3.1-8b"],
                        "max_concurrency": 1,
                    }
                ]
            }
        )
        quotas = {
            "acme": TenantQuota(rate_tokens_per_s=0.001, burst_tokens=1),
            "beta": TenantQuota(rate_tokens_per_s=1e6, burst_tokens=1e6),
        }
        router = Router(inventory, quotas=quotas)
        (tmp_path / "policy.yaml").write_text(_STREAM_POLICY)
        with Gate.open(tmp_path / "policy.yaml", store=str(tmp_path / "gate.db")) as gate:
            gate.attach_dispatcher(Dispatcher(inventory, router, slo_ttft_s=5.0))
            # acme's first streamed call is served (the backend is free) and spends its bucket.
            assert "".join(c.content for c in gate.dispatch_stream(PAYLOAD, tenant="acme"))
            # Another tenant holds the only slot.
            holder = gate.dispatch_stream({**PAYLOAD, "max_tokens": 2000}, tenant="other")
            assert next(holder).backend == "b0"
            # acme is over its quota under saturation: shed at once, naming its tenant.
            with pytest.raises(Shed, match="tenant 'acme' is over its token quota"):
                next(gate.dispatch_stream(PAYLOAD, tenant="acme"))
            # beta, within its quota, waits in line and is served once the slot frees.
            got: list[Any] = []
            reader = threading.Thread(
                target=lambda: got.append(
                    "".join(c.content for c in gate.dispatch_stream(PAYLOAD, tenant="beta"))
                )
            )
            reader.start()
            # The router's line (no public view): beta's call is told to wait, not shed.
            _until(lambda: len(router._waiters) == 1, "beta's call waits in line")
            holder.close()
            reader.join(timeout=30)
            assert not reader.is_alive()
            assert got and got[0]
    finally:
        server.stop()


def test_a_dispatched_call_keeps_its_sessions_backend(tmp_path: Path) -> None:
    """Mutant d2: ``Gate.dispatch`` forwarding ``session=None`` to the dispatcher. Rule: the calls
    of one session (an agent run's thread) go to the backend its first call went to, whose cache
    holds its prefix, while that backend meets the SLO; without the session, equal backends are
    drawn at random and the conversation is spread over both."""
    servers = [SimServer(time_scale=0.05).start() for _ in range(2)]
    try:
        inventory = inventory_from_mapping(
            {
                "backends": [
                    {"name": f"b{i}", "url": s.url, "engine": "vllm", "models": ["llama-3.1-8b"]}
                    for i, s in enumerate(servers)
                ]
            }
        )
        (tmp_path / "policy.yaml").write_text(_STREAM_POLICY)
        with Gate.open(tmp_path / "policy.yaml", store=str(tmp_path / "gate.db")) as gate:
            gate.attach_dispatcher(Dispatcher(inventory, Router(inventory, seed=7), slo_ttft_s=30.0))

            def ask(n: int, session: str | None) -> str:
                payload = {**PAYLOAD, "messages": [{"role": "user", "content": f"question {n}"}]}
                return gate.dispatch(payload, session=session).backend

            # The precondition: without a session the two backends are both drawn.
            assert len({ask(n, None) for n in range(12)}) == 2
            first = ask(100, "conversation")
            assert [ask(n, "conversation") for n in range(101, 109)] == [first] * 8
    finally:
        for server in servers:
            server.stop()
