"""What a call is charged when the usage it reports is no token count a call can use: more than
``MAX_USAGE_TOKENS`` (10^9) tokens in either count, on every path that settles reported usage
(the Gate's ``run``/``arun`` with ``spent``, and the LangGraph middleware's model call, whose
``usage_metadata`` is read and handed to the Gate).

The dispatcher reads such a count in a backend's answer as garbage, not a bill
(``dispatch._answers._count``), and never charges it. The Gate reads it the same way wherever the
usage comes from: the call is charged what it reserved, its ``outcome`` entry says what was
reported and what was charged, and its span carries no ``gen_ai.usage.*`` (the count the log
refused). Until review R56 the Gate checked the counts' sign, not their size: a LangChain model
reporting 10^20 input tokens was charged them, and its ``outcome`` entry said "overran the
usd_micros budget by 99999999999999..." with the budget spent out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_gate import Setup
from test_gate import setup as setup  # the fixture
from test_langgraph import _make_team

from agentgate.capabilities import Call
from agentgate.dispatch.backends import MAX_USAGE_TOKENS
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent

ABSURD = 10**20
"""The input tokens a hostile or broken model reports: past any context window, past 2**63."""

# ``small`` costs 1 micro-dollar a prompt token and 2 an output token (test_gate.POLICY): a call
# of ``max_tokens`` 100 estimated at a 50-token prompt reserves 50 + 2 * 100.
RESERVED = 50 + 2 * 100


def _garbage(reasons: list[str]) -> list[str]:
    return [r for r in reasons if r.startswith("reported usage ")]


@pytest.mark.parametrize(
    "usage",
    [(ABSURD, 5), (5, ABSURD), (MAX_USAGE_TOKENS + 1, 5), (5, MAX_USAGE_TOKENS + 1)],
    ids=["absurd-input", "absurd-output", "input-past-max", "output-past-max"],
)
def test_usage_past_max_usage_tokens_is_charged_as_reserved_and_says_so(
    setup: Setup, usage: tuple[int, int]
) -> None:
    """Review R56: usage over MAX_USAGE_TOKENS was charged in full (or its output capped), not read as garbage."""
    auth = setup.gate.authorize(setup.agent, Call.model("small", {"max_tokens": 100}), tokens=(50, 100))
    assert setup.gate.run(auth, lambda: "the answer", spent=lambda _: usage) == "the answer"
    outcome = setup.entries()[-1]
    assert outcome.kind == "outcome" and outcome.status == "ok"
    assert outcome.budget_delta == RESERVED
    assert setup.gate.budget_usage(setup.agent)[setup.agent.chain.root.id] == (RESERVED, 10_000)
    (reason,) = _garbage(outcome.reasons)
    assert reason == (
        f"reported usage {usage!r} is not two token counts from 0 to {MAX_USAGE_TOKENS:,}; "
        f"charged as reserved ({RESERVED} usd_micros)"
    )
    assert not any(r.startswith("overran") or "max_tokens" in r for r in outcome.reasons)
    assert setup.gate.verify().ok


def test_usage_of_max_usage_tokens_is_a_bill(setup: Setup) -> None:
    """The bound itself is a count: charged as reported, overrunning the budget (review R56's bound)."""
    auth = setup.gate.authorize(setup.agent, Call.model("small", {"max_tokens": 100}), tokens=(50, 100))
    setup.gate.run(auth, lambda: "x", spent=lambda _: (MAX_USAGE_TOKENS, 5))
    outcome = setup.entries()[-1]
    assert outcome.budget_delta == MAX_USAGE_TOKENS + 2 * 5 and _garbage(outcome.reasons) == []
    assert setup.gate.budget_usage(setup.agent)[setup.agent.chain.root.id] == (10_000, 10_000)


async def test_an_async_call_reporting_absurd_usage_is_charged_as_reserved(setup: Setup) -> None:
    """Review R56: Gate.arun charged a reported usage over MAX_USAGE_TOKENS in full."""
    auth = setup.gate.authorize(setup.agent, Call.model("small", {"max_tokens": 100}), tokens=(50, 100))

    async def call() -> str:
        return "x"

    assert await setup.gate.arun(auth, call, spent=lambda _: (ABSURD, 5)) == "x"
    outcome = setup.entries()[-1]
    assert outcome.budget_delta == RESERVED and len(_garbage(outcome.reasons)) == 1


def test_a_span_does_not_carry_usage_its_outcome_read_as_garbage(tmp_path: Path) -> None:
    """Review R56: the span of a call reporting MAX_USAGE_TOKENS + 1 input tokens carried them,
    while its outcome entry (once the Gate read such a count as garbage) charged it as reserved."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    made = Setup(tmp_path, tracer=provider.get_tracer("test"))
    try:
        for usage in ((MAX_USAGE_TOKENS + 1, 5), (7, 5)):
            auth = made.gate.authorize(made.agent, Call.model("small", {"max_tokens": 100}), tokens=(50, 100))
            made.gate.run(auth, lambda: "x", spent=lambda _, usage=usage: usage)  # type: ignore[misc]
        made.gate.flush()  # a call's span ends once its outcome is written (review R69)
        garbage, counted = [s for s in exporter.get_finished_spans() if s.name == "chat small"]
        assert garbage.attributes is not None and counted.attributes is not None
        assert "gen_ai.usage.input_tokens" not in garbage.attributes
        assert "gen_ai.usage.output_tokens" not in garbage.attributes
        assert counted.attributes["gen_ai.usage.input_tokens"] == 7
    finally:
        made.gate.close()


# --- the LangGraph middleware, in a real create_agent run ---------------------------------------


class _Absurd(ScriptedChatModel):
    """A chat model whose every answer reports ``usage`` as its ``usage_metadata``."""

    usage: dict[str, Any]

    def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
        result = super()._generate(messages, stop, run_manager, **kwargs)
        message = result.generations[0].message
        assert isinstance(message, AIMessage)
        message.usage_metadata = self.usage  # type: ignore[assignment]
        return result


@pytest.mark.parametrize(
    "usage",
    [
        {"input_tokens": ABSURD, "output_tokens": 5, "total_tokens": ABSURD + 5},
        {"input_tokens": 5, "output_tokens": MAX_USAGE_TOKENS + 1, "total_tokens": MAX_USAGE_TOKENS + 6},
    ],
    ids=["absurd-input", "output-past-max"],
)
def test_a_langgraph_model_reporting_absurd_usage_is_charged_as_reserved(
    tmp_path: Path, usage: dict[str, int]
) -> None:
    """Review R56: a LangChain model reporting 10**20 tokens was charged them and spent the budget out."""
    team = _make_team(tmp_path)
    try:
        model = _Absurd(turns=[], usage=usage)
        agent = create_gated_agent(team.gate, name="supervisor", model=model, tools=[], max_tokens=64)
        result = agent.invoke({"messages": [{"role": "user", "content": "go"}]}, context=team.supervisor)
        assert result["messages"][-1].content == "Done."
        team.gate.flush()
        entries = list(team.gate.audit.entries())
        (allow,) = [e for e in entries if e.kind == "allow" and e.resource == "model:scripted"]
        (outcome,) = [e for e in entries if e.kind == "outcome"]
        assert outcome.status == "ok" and outcome.budget_delta == allow.budget_delta  # as reserved
        (reason,) = _garbage(outcome.reasons)
        reported = (usage["input_tokens"], usage["output_tokens"])
        assert reason.startswith(f"reported usage {reported!r} is not two token counts")
        assert reason.endswith(f"charged as reserved ({allow.budget_delta} usd_micros)")
        assert not any(r.startswith("overran") for r in outcome.reasons)
        spent, limit = team.gate.budget_usage(team.supervisor)[team.supervisor.chain.root.id]
        assert spent == allow.budget_delta < limit
        assert team.gate.verify().ok
    finally:
        team.gate.close()
