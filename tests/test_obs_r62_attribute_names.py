"""Every attribute name agentgate puts on a span or a span event is documented, and each
``gen_ai.*`` one is a name of the OpenTelemetry GenAI semantic conventions."""

from __future__ import annotations

import re
from pathlib import Path

import agentgate

ROOT = Path(agentgate.__file__).parent
SOURCES = [
    ROOT / "audit" / "spans.py",
    *sorted((ROOT / "tasks").glob("*.py")),
    *sorted((ROOT / "gate").glob("*.py")),
]
MODULES = {
    ".".join(("agentgate", *path.relative_to(ROOT).with_suffix("").parts)).removesuffix(".__init__")
    for path in ROOT.rglob("*.py")
}
NOT_ATTRIBUTES = {"agentgate.denied", "agentgate.failed"}  # values of error.type
SEMCONV_GEN_AI = {  # the GenAI attributes of semantic conventions 1.44.0 that agentgate sets
    "gen_ai.operation.name",
    "gen_ai.tool.name",
    "gen_ai.tool.call.id",
    "gen_ai.tool.type",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "gen_ai.request.model",
    "gen_ai.response.model",
    "gen_ai.provider.name",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.agent.name",
    "gen_ai.agent.id",
}


def _names(prefix: str) -> set[str]:
    found: set[str] = set()
    for source in SOURCES:
        found |= set(re.findall(rf'"({prefix}\.[a-z_.]+[a-z_])"', source.read_text()))
    return found


def _logger(name: str) -> bool:
    """Whether ``name`` is a module's logger name (``agentgate.gate``, ``agentgate.gate._approval``)."""
    return any(part.startswith("_") for part in name.split(".")) or name in MODULES


def test_every_agentgate_attribute_is_in_the_operations_guide() -> None:
    """Review R62: the scheduler's event attributes (``agentgate.attempt``, ``agentgate.error_class``,
    ``agentgate.delay_s``, ``agentgate.reason``, ``agentgate.idempotency_key``...) were in no
    docs page. Each ``agentgate.*`` name the span helpers, the scheduler and the Gate set is in
    docs/operations.md, "Traces and metrics"."""
    guide = (ROOT.parent / "docs" / "operations.md").read_text()
    names = {n for n in _names("agentgate") if n not in NOT_ATTRIBUTES and not _logger(n)}
    assert names, "no attribute found: the pattern is wrong"
    assert sorted(n for n in names if f"`{n}`" not in guide) == []


def test_every_gen_ai_attribute_is_a_semantic_convention_name() -> None:
    """Review R62: the ``gen_ai.*`` names agentgate sets are those of the conventions (none of
    its own under the ``gen_ai`` namespace, which the conventions own)."""
    assert _names("gen_ai") == SEMCONV_GEN_AI
