"""Documented settings that nothing read (found by review R44), now wired or checked.

What holds (real components: ``agentgate.sim.SimServer`` backends over loopback HTTP, a real
gateway with a real SQLite store, a real ``Gate`` with its dispatcher thread):

- a policy model's ``slo.ttft_ms`` is the TTFT budget its calls are routed under: in the gateway
  (a model without one keeps the gateway's ``slo_ttft_s``), in a ``Dispatcher`` built with
  ``model_slos(policy)`` (a caller's own ``slo_ttft_s`` overrides it), and so in ``Gate.dispatch``
  and the LangGraph ``DispatchedChatModel`` served by such a dispatcher. Seen in behaviour: a
  class-1 call that finds its only backend full waits for the budget, then is shed with a reason
  naming it (``... longer than the SLO (0.05s)``); before, every call had 2 s;
- an inventory backend's ``cost`` decides among backends about as fast (cost-aware tie-break):
  idle, every call goes to the cheaper one; full, the dearer one takes the overflow at once;
- ``interconnect.bandwidth_gbps`` is informational (placement orders levels by the hierarchy);
  loading refuses figures that contradict the hierarchy, naming file:line;
- a dispatcher SLO that is no positive finite number is an ``InputError``.

Fixed by the lead (was a strict xfail): ``Gate.attach_dispatcher`` did not give the dispatcher
the policy's SLOs (a dispatcher attached as docs/langgraph.md shows still routed the LangGraph
model calls under its own 2 s default); it now fills ``model_slo_ttft_s`` from the policy,
keeping what the dispatcher was given.

``slo.tpot_ms`` stays informational (the router predicts time to first token only; documented).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import _http
import httpx
import pytest

from agentgate.dispatch import Dispatcher, Router, inventory_from_mapping, load_inventory, model_slos
from agentgate.dispatch.gateway import Gateway, GatewayGate, GatewayServer, invocation_headers
from agentgate.errors import InputError, InventoryError, Shed
from agentgate.gate import Gate
from agentgate.integrations.langgraph import DispatchedChatModel
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.sim import SimServer
from agentgate.store import SQLiteStore

FAST = "llama-3.1-8b"  # declares slo.ttft_ms: 50
PLAIN = "qwen3-32b"  # declares none


def _policy_text(root: str = "", agent: str = "") -> str:
    keys = (
        f"""
trust_anchors:
  root: {{did: "{root}"}}
tenants:
  lab: {{}}
principals:
  agent: {{kind: agent, did: "{agent}", tenant: lab, roles: [chat]}}
roles:
  chat:
    kind: agent
    capabilities:
      - resource: model:{FAST}
      - resource: model:{PLAIN}
    budget: {{limit: 100000000, unit: usd_micros}}
    ttl_s: 3600
"""
        if root
        else "tools:\n  search.web: {}\n"
    )
    return f"""
version: 1
models:
  {FAST}: {{cost_per_mtok: {{input: 1, output: 1}}, slo: {{ttft_ms: 50, tpot_ms: 40}}}}
  {PLAIN}: {{cost_per_mtok: {{input: 1, output: 1}}}}
{keys}"""


def _payload(model: str, text: str, max_tokens: int) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens}


@pytest.fixture(scope="module")
def sims() -> Iterator[dict[str, SimServer]]:
    servers = {FAST: SimServer(model_name=FAST).start(), PLAIN: SimServer(model_name=PLAIN).start()}
    yield servers
    for server in servers.values():
        server.stop()


def _full_inventory(sims: dict[str, SimServer]) -> Any:
    """One backend per model, room for one call each: a held stream fills it."""
    return inventory_from_mapping(
        {
            "backends": [
                {"name": f"b-{i}", "url": s.url, "engine": "vllm", "models": [m], "max_concurrency": 1}
                for i, (m, s) in enumerate(sims.items())
            ]
        }
    )


# --- models.*.slo.ttft_ms --------------------------------------------------------------------


def test_model_slos_reads_the_policys_ttft_targets() -> None:
    policy = parse_policy(_policy_text(), source="p.yaml")
    assert model_slos(policy) == {FAST: 0.05}
    assert model_slos(policy.document) == {FAST: 0.05}


def test_the_dispatcher_routes_a_call_under_its_models_slo_unless_the_caller_names_one(
    sims: dict[str, SimServer],
) -> None:
    policy = parse_policy(_policy_text(), source="p.yaml")
    inventory = _full_inventory(sims)

    async def scenario() -> list[str]:
        reasons: list[str] = []
        dispatcher = Dispatcher(
            inventory, Router(inventory), slo_ttft_s=0.4, model_slo_ttft_s=model_slos(policy)
        )
        async with dispatcher:
            holders = [dispatcher.stream(_payload(m, "hold the slot", 4000)) for m in (FAST, PLAIN)]
            for held in holders:
                await held.__anext__()  # the backend is generating: its one slot is taken
            try:
                for model, route in ((FAST, {}), (PLAIN, {}), (FAST, {"slo_ttft_s": 0.15})):
                    with pytest.raises(Shed) as shed:
                        await dispatcher.chat(_payload(model, "next", 4), priority=1, **route)
                    reasons.append(str(shed.value))
            finally:
                for held in holders:
                    await held.aclose()
        return reasons

    reasons = asyncio.run(scenario())
    assert "longer than the SLO (0.05s)" in reasons[0], reasons  # the policy's 50 ms
    assert "longer than the SLO (0.40s)" in reasons[1], reasons  # no SLO declared: the default
    assert "longer than the SLO (0.15s)" in reasons[2], reasons  # the caller's own wins


def test_the_gateway_routes_each_model_under_the_policys_slo(
    tmp_path: Path, sims: dict[str, SimServer]
) -> None:
    root, agent_key = SigningKey.generate(), SigningKey.generate()
    policy = parse_policy(_policy_text(root.did, agent_key.did), source="gw.yaml")
    gate = GatewayGate(policy, SQLiteStore(tmp_path / "agentgate.db"))
    server = GatewayServer(Gateway(gate, _full_inventory(sims), slo_ttft_s=0.4), port=0).start()
    agent = gate.issue(root, name="agent", key=agent_key, role="chat")

    def post(body: dict[str, Any]) -> httpx.Response:
        content = json.dumps(body).encode()
        headers = {"content-type": "application/json", **invocation_headers(agent.key, agent.chain, body)}
        return _http.post(f"{server.url}/chat/completions", content=content, headers=headers, timeout=30)

    try:
        with _http.Client(timeout=30) as client:
            answers: dict[str, httpx.Response] = {}
            for model in (FAST, PLAIN):
                held_body = {**_payload(model, "hold the slot", 4000), "stream": True}
                content = json.dumps(held_body).encode()
                headers = {
                    "content-type": "application/json",
                    **invocation_headers(agent.key, agent.chain, held_body),
                }
                with client.stream(
                    "POST", f"{server.url}/chat/completions", content=content, headers=headers
                ) as held:
                    assert held.status_code == 200
                    lines = held.iter_lines()  # kept: a dropped iterator closes the stream
                    assert next(lines).startswith("data: ")  # streaming: the backend's one slot is taken
                    answers[model] = post(_payload(model, "next", 4))
        for model, expected in ((FAST, "(0.05s)"), (PLAIN, "(0.40s)")):
            answer = answers[model]
            assert answer.status_code == 429, answer.text
            assert f"longer than the SLO {expected}" in answer.json()["error"]["message"], answer.text
    finally:
        server.stop()
        gate.close()


def _gate_with_dispatcher(tmp_path: Path, sims: dict[str, SimServer], *, policy_slos: bool) -> Gate:
    (tmp_path / "policy.yaml").write_text(_policy_text())
    gate = Gate.open(tmp_path / "policy.yaml", store=str(tmp_path / "gate.db"))
    inventory = _full_inventory(sims)
    slos = model_slos(gate.policy) if policy_slos else None
    gate.attach_dispatcher(Dispatcher(inventory, Router(inventory), slo_ttft_s=0.4, model_slo_ttft_s=slos))
    return gate


def _langgraph_shed_reason(gate: Gate) -> str:
    """What the LangGraph dispatched model is told when its backend is full."""
    held = gate.dispatch_stream(_payload(FAST, "hold the slot", 4000))
    try:
        next(held)
        with pytest.raises(Shed) as shed:
            DispatchedChatModel(gate=gate, model_name=FAST, max_tokens=4).invoke("next")
        return str(shed.value)
    finally:
        held.close()
        gate.close()


def test_the_langgraph_dispatched_model_gets_the_policys_slo_from_a_dispatcher_given_it(
    tmp_path: Path, sims: dict[str, SimServer]
) -> None:
    reason = _langgraph_shed_reason(_gate_with_dispatcher(tmp_path, sims, policy_slos=True))
    assert "longer than the SLO (0.05s)" in reason, reason


def test_a_dispatcher_attached_to_a_gate_applies_the_policys_slo_unasked(
    tmp_path: Path, sims: dict[str, SimServer]
) -> None:
    reason = _langgraph_shed_reason(_gate_with_dispatcher(tmp_path, sims, policy_slos=False))
    assert "longer than the SLO (0.05s)" in reason, reason  # today: its own 0.40s


@pytest.mark.parametrize(
    "kwargs",
    [
        {"slo_ttft_s": float("nan")},
        {"slo_ttft_s": 0.0},
        {"slo_ttft_s": float("inf")},
        {"model_slo_ttft_s": {FAST: -1.0}},
        {"model_slo_ttft_s": {FAST: float("nan")}},
    ],
)
def test_a_dispatcher_slo_that_is_no_positive_finite_number_is_refused(kwargs: dict[str, Any]) -> None:
    inventory = inventory_from_mapping(
        {"backends": [{"name": "b", "url": "http://127.0.0.1:9", "models": [FAST]}]}
    )
    with pytest.raises(InputError, match="slo_ttft_s"):
        Dispatcher(inventory, Router(inventory), **kwargs)


# --- backends[].cost ------------------------------------------------------------------------


def test_the_cheaper_of_two_equal_backends_takes_the_calls_and_the_dearer_the_overflow(
    sims: dict[str, SimServer],
) -> None:
    other = SimServer(model_name=FAST).start()
    try:
        inventory = inventory_from_mapping(
            {
                "backends": [
                    # the dearer first: list order must not decide
                    {
                        "name": "dear",
                        "url": other.url,
                        "engine": "vllm",
                        "models": [FAST],
                        "cost": {"input_per_mtok": 300000, "output_per_mtok": 900000},
                    },
                    {
                        "name": "cheap",
                        "url": sims[FAST].url,
                        "engine": "vllm",
                        "models": [FAST],
                        "max_concurrency": 1,
                        "cost": {"input_per_mtok": 100000, "output_per_mtok": 300000},
                    },
                ]
            }
        )

        async def scenario() -> tuple[list[str], str, str]:
            async with Dispatcher(inventory, Router(inventory, seed=7)) as dispatcher:
                idle = []
                for i in range(8):  # distinct prompts: no cached prefix favours either
                    result = await dispatcher.chat(_payload(FAST, f"question {i} " * 3, 2), slo_ttft_s=30.0)
                    idle.append(result.backend)
                held = dispatcher.stream(_payload(FAST, "hold the slot", 4000), slo_ttft_s=30.0)
                first = await held.__anext__()
                try:
                    overflow = await dispatcher.chat(_payload(FAST, "one more", 2), slo_ttft_s=30.0)
                finally:
                    await held.aclose()
                return idle, first.backend, overflow.backend

        idle, holder, overflow = asyncio.run(scenario())
    finally:
        other.stop()
    assert idle == ["cheap"] * 8, idle  # unpriced, the power of two choices split them ~evenly
    assert (holder, overflow) == ("cheap", "dear")  # cost never makes a call wait


# --- interconnect.bandwidth_gbps ------------------------------------------------------------


def test_bandwidths_that_contradict_the_hierarchy_are_refused_with_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(
        "interconnect:\n"
        "  hierarchy: [nvlink_domain, node, rack]\n"
        "  bandwidth_gbps: {nvlink_domain: 900, node: 64, rack: 100}\n"
    )
    with pytest.raises(InventoryError) as refused:
        load_inventory(path)
    message = str(refused.value)
    assert f"{path}:" in message and "bandwidth_gbps of rack (100)" in message and "node (64)" in message
    path.write_text("interconnect:\n  bandwidth_gbps: {nvlink_domain: 900, node: 64, rack: 50}\n")
    assert load_inventory(path).interconnect.bandwidth_gbps == {"nvlink_domain": 900, "node": 64, "rack": 50}


def test_the_shipped_inventory_still_loads() -> None:
    shipped = Path(__file__).resolve().parent.parent / "policies" / "inventory.yaml"
    assert load_inventory(shipped, read_keys=False).interconnect.bandwidth_gbps
