"""Review R68 of the GPU type names the broker compares and the Gate decides on.

A lease is decided as ``gpu:<type in lower case>`` (``GatedBroker``) and placed on the GPUs whose
type is the request's exactly. ``str.lower`` maps a non-ASCII letter to an ASCII one: the KELVIN
SIGN (U+212A) lowers to ``k``, so a request for ``\u212a80`` was decided as ``gpu:k80``, and an
inventory or topology declaring ``\u212a80`` was leased under a grant for ``gpu:k80`` while no
reader of the inventory, the grant or the audit log saw one name in the other. A GPU type is ASCII
now, in a request, a topology and an inventory, and one that is not is refused with a typed error
naming the value and its first non-ASCII character, before any decision.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_broker_gated import TRAINER_POLICY

from agentgate.dispatch.broker import (
    Broker,
    GangRequest,
    GatedBroker,
    GpuSpec,
    TenantQuota,
    Topology,
    synthetic_topology,
)
from agentgate.dispatch.inventory import parse_inventory
from agentgate.errors import BrokerError, InventoryError
from agentgate.gate import AgentIdentity, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

KELVIN_80 = "\u212a80"
"""``K80`` spelled with the KELVIN SIGN: ``KELVIN_80.lower() == "k80"``."""

POLICY = TRAINER_POLICY.replace("gpu:h100", "gpu:k80")
"""test_broker_gated's trainer policy, on K80s."""


class _Gated:
    def __init__(self, path: Path) -> None:
        keys = {n: SigningKey.generate() for n in ("root", "trainer")}
        text = POLICY.format(**{n: k.did for n, k in keys.items()})
        self.gate = Gate(parse_policy(text, source="gpu.yaml"), SQLiteStore(path / "agentgate.db"))
        topology = synthetic_topology(nodes=1, gpus_per_node=8, types=(("K80", 24.0),))
        self.broker = Broker(topology, [TenantQuota("team-a", 8)], clock=lambda: 1000.0)
        self.gated = GatedBroker(self.gate, self.broker)
        self.trainer: AgentIdentity = self.gate.issue(
            keys["root"], name="trainer", key=keys["trainer"], role="trainer"
        )

    def call_entries(self) -> list[str]:
        self.gate.flush()
        return [f"{e.kind} {e.resource}" for e in self.gate.audit.entries() if e.resource != "agent:trainer"]


@pytest.fixture
def gated(tmp_path: Path) -> Iterator[_Gated]:
    made = _Gated(tmp_path)
    yield made
    made.gate.close()


def test_a_request_naming_a_gpu_type_with_a_kelvin_sign_is_refused_before_any_decision(gated: _Gated) -> None:
    """Review R68: ``gpu_type="\u212a80"`` was decided as ``gpu:k80`` (``"\u212a80".lower()``):
    an allow was audited for a type the request did not name. It is refused, naming the type and
    the character, and nothing is decided or audited."""
    with pytest.raises(BrokerError) as refused:
        gated.gated.submit(gated.trainer, GangRequest("r1", "team-a", 1, gpu_type=KELVIN_80))
    message = str(refused.value)
    assert "gpu_type" in message and "U+212A KELVIN SIGN" in message and "'r1'" in message, message
    assert gated.call_entries() == []
    assert gated.broker.leases() == [] and gated.broker.queue() == []


@pytest.mark.parametrize("gpu_type", [KELVIN_80, "h\u0131100", "\uff28100", "H100\u00df"])
def test_a_gang_request_refuses_a_gpu_type_that_is_not_ascii(gpu_type: str) -> None:
    """Review R68: a request's ``gpu_type`` is compared with the topology's types as written and
    decided in lower case; a non-ASCII one (KELVIN SIGN, dotless i, full-width H, sharp s) could
    alias an ASCII type under ``lower``/``casefold``. ``GangRequest`` refuses it."""
    with pytest.raises(BrokerError, match=r"request 'r1': gpu_type .* holds U\+[0-9A-F]{4} "):
        GangRequest("r1", "team-a", 1, gpu_type=gpu_type)


def test_a_topology_refuses_a_gpu_type_that_is_not_ascii() -> None:
    """Review R68: a topology built by hand took ``\u212a80`` as a GPU type, and ``GatedBroker``
    then leased it under a grant for ``gpu:k80``. It is refused, naming ``gpus[1].type``."""
    gpu = GpuSpec(id="g0", type="K80", memory_gb=24.0, node="n0", nvlink_domain="d0", rack="r0")
    with pytest.raises(InventoryError) as refused:
        Topology((gpu, dataclasses.replace(gpu, id="g1", type=KELVIN_80)))
    message = str(refused.value)
    assert message.startswith("gpus[1].type: ") and "U+212A KELVIN SIGN" in message, message


def test_an_inventory_refuses_a_gpu_type_with_a_kelvin_sign_at_its_line() -> None:
    """Review R68: an inventory GPU type ``\u212a80`` loaded (in lower case it is the resource
    name ``gpu:k80``), so a grant for ``gpu:k80`` leased it. It is refused at the type's line,
    naming the GPU, its node and the character."""
    text = f"""nodes:
  - name: n1
gpus:
  - id: n1/0
    type: K80
    memory_gb: 24
    node: n1
  - id: n1/1
    type: "{KELVIN_80}"
    memory_gb: 24
    node: n1
"""
    with pytest.raises(InventoryError) as refused:
        parse_inventory(text, source="inv.yaml")
    message = str(refused.value)
    assert message.startswith("inv.yaml:9:11: gpus.1.type: "), message
    assert "'n1/1'" in message and "node 'n1'" in message and "U+212A KELVIN SIGN" in message, message


def test_a_gated_request_is_placed_on_the_type_its_decision_named_in_any_case(gated: _Gated) -> None:
    """Review R68: a request for ``k80`` was decided as ``gpu:k80`` and allowed, then refused by
    the broker ("only 0 match its filters", an ``error`` outcome): placement compared the type as
    written with the inventory's ``K80``. The broker places on the type the decision named: the
    type in lower case, ``k80`` is ``K80``."""
    answer = gated.gated.submit(gated.trainer, GangRequest("r1", "team-a", 2, gpu_type="k80"))
    lease = answer.lease()
    assert answer.allowed and lease is not None and len(lease.gpus) == 2
    assert gated.call_entries() == ["allow gpu:k80", "outcome gpu:k80"]


def test_a_broker_places_a_gpu_type_in_any_case_on_the_gpus_of_that_type() -> None:
    """Review R68: ``Broker`` itself compared a request's ``gpu_type`` with the topology's as
    written (``h100`` matched no ``H100``), while the type a lease is decided and priced as is
    the lower case one. A type matches in any case, and only that type."""
    topology = synthetic_topology(nodes=2, gpus_per_node=4, types=(("H100", 80.0), ("A100", 40.0)))
    broker = Broker(topology, [TenantQuota("t", 8)], clock=lambda: 1000.0)
    broker.submit(GangRequest("r1", "t", 4, gpu_type="h100"))
    broker.submit(GangRequest("r2", "t", 4, gpu_type="a100"))
    types = {
        lease.id: {topology.gpus[topology.number(g)].type for g in lease.gpus} for lease in broker.leases()
    }
    assert types == {"r1": {"H100"}, "r2": {"A100"}}
    with pytest.raises(BrokerError, match="only 4 match its filters"):
        broker.submit(GangRequest("r3", "t", 5, gpu_type="h100"))
