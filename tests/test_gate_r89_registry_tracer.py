"""Review R89: ``Gate(...)`` checked each of its arguments with ``expect`` before opening
anything, except ``registry`` and ``tracer``, which it kept as given. A ``registry`` that was no
``CollectorRegistry`` made the Gate, and then every tool call was allowed and audited and failed
in ``run`` (its scheduler refused the registry), leaving an allow and an ``error`` outcome per
call; a ``tracer`` that was no ``Tracer`` logged a traceback for each span and lost it. Both are
now refused by ``Gate(...)`` with an ``InputError`` naming the parameter, nothing written.

Real components: a Gate on a SQLite file, prometheus_client's registry and OpenTelemetry's
tracers."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import CollectorRegistry
from test_gate_r89_identity_fields import policy_text

from agentgate.capabilities import Call
from agentgate.errors import InputError
from agentgate.gate import Gate
from agentgate.keys import SigningKey
from agentgate.policy import Policy, parse_policy
from agentgate.store import SQLiteStore

KEYS = {name: SigningKey.generate() for name in ("root", "agent")}


def _policy() -> Policy:
    return parse_policy(policy_text(KEYS, budget=""), source="p.yaml")


@pytest.mark.parametrize(
    ("given", "named"),
    [
        ({"registry": {"not": "a registry"}}, r"^registry must be a prometheus_client CollectorRegistry"),
        ({"registry": "registry"}, r"^registry must be a prometheus_client CollectorRegistry"),
        ({"tracer": "not a tracer"}, r"^tracer must be an OpenTelemetry Tracer"),
        ({"tracer": TracerProvider()}, r"^tracer must be an OpenTelemetry Tracer"),
    ],
    ids=["registry-dict", "registry-text", "tracer-text", "tracer-provider"],
)
def test_a_gate_with_a_registry_or_tracer_of_the_wrong_type_is_not_made(
    tmp_path: Path, given: dict[str, object], named: str
) -> None:
    store = SQLiteStore(tmp_path / "a.db")
    try:
        with pytest.raises(InputError, match=named):
            Gate(_policy(), store, **given)  # type: ignore[arg-type]
    finally:
        store.close()
    with Gate(_policy(), SQLiteStore(tmp_path / "a.db")) as gate:
        assert gate.audit.size() == 0  # nothing was written by the Gate that was refused


def test_a_gate_with_its_own_registry_and_tracer_runs_its_calls(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    tracer = TracerProvider().get_tracer("r89")
    with Gate(_policy(), SQLiteStore(tmp_path / "a.db"), registry=registry, tracer=tracer) as gate:
        agent = gate.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="worker")
        auth = gate.authorize(agent, Call.tool("lookup", {"id": "1"}))
        assert gate.run(auth, lambda: "found") == "found"
        assert gate.registry is registry and gate.tracer is tracer
