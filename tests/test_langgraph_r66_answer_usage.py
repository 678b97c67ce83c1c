"""Review R66: a model answer whose usage cannot count it is charged as reserved under LangGraph.

The gateway charges the reservation for a usage that cannot count its answer (fewer than one
output token for each ``MAX_CHARS_PER_TOKEN`` characters: ``counts_answer``), and its outcome says
the usage could not be read. ``GateMiddleware`` charged an in-process model's answer as its
``usage_metadata`` said: a chat model (a provider's client, ``DispatchedChatModel`` over a backend
that reports ``completion_tokens: 0``) answering 20,000 characters with ``output_tokens: 0`` had
the output free. A real ``create_agent`` graph (``create_gated_agent``) on a real SQLite store,
with the scripted ``Hostile`` model of tests/test_langgraph_hostile_model.py, whose usage a test
sets; sync and async."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain.agents.structured_output import ProviderStrategy, StructuredOutputValidationError
from pydantic import BaseModel
from test_langgraph_hostile_model import GO, Hostile, Setup, _answer, _call
from test_langgraph_hostile_model import setup as setup  # the fixture

from agentgate.dispatch._sse import MAX_CHARS_PER_TOKEN
from agentgate.integrations.langgraph import create_gated_agent

UNREAD = "the call ran but its usage could not be read; charged as reserved"
LIMIT = 64
"""The output tokens each model call reserves (``create_gated_agent(max_tokens=...)``)."""


def _usage(output: int) -> dict[str, int]:
    return {"input_tokens": 3, "output_tokens": output, "total_tokens": 3 + output}


def _run(setup: Setup, model: Hostile, mode: str, **options: Any) -> dict[str, Any]:
    agent = create_gated_agent(
        setup.gate, name="boss", model=model, tools=setup.tools(), max_tokens=LIMIT, **options
    )
    if mode == "sync":
        return agent.invoke(GO, context=setup.boss)  # type: ignore[no-any-return]
    return asyncio.run(agent.ainvoke(GO, context=setup.boss))  # type: ignore[no-any-return]


def _model_outcomes(setup: Setup) -> list[Any]:
    return [e for e in setup.entries() if e.kind == "outcome" and e.resource == "model:scripted"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_long_answer_reporting_no_output_is_charged_as_reserved(setup: Setup, mode: str) -> None:
    """Review R66: 20,000 characters answered with ``output_tokens: 0`` were charged 3 input
    tokens, the output free. Now the call is charged its reservation (at least its ``LIMIT``
    output tokens) and its outcome says its usage could not be read."""
    model = Hostile(turns=[], final="x" * 20_000, usage=_usage(0))
    result = _run(setup, model, mode)
    assert result["messages"][-1].content == "x" * 20_000
    [outcome] = _model_outcomes(setup)
    assert outcome.status == "ok" and UNREAD in outcome.reasons, outcome.reasons
    assert setup.spent()[0] >= LIMIT
    assert setup.verified()


def test_tool_calls_reporting_no_output_are_charged_as_reserved(setup: Setup) -> None:
    """Review R66: an answer that is a tool call with 5,000 characters of arguments, reporting
    no output, is an answer too (its text is its calls'), charged as reserved."""
    model = Hostile(turns=[_answer(_call("search", {"query": "q" * 5_000}, "s1"))], usage=_usage(0))
    _run(setup, model, "sync")
    first, _ = _model_outcomes(setup)
    assert UNREAD in first.reasons, first.reasons
    assert setup.ran == ["search:" + "q" * 5_000]


class _Verdict(BaseModel):
    verdict: str


def test_an_unparsable_structured_answer_reporting_no_output_is_charged_as_reserved(setup: Setup) -> None:
    """Review R66: a structured answer that cannot be parsed is charged the usage it reports
    (review R60); one that reports no output for 20,000 characters is charged as reserved."""
    model = Hostile(turns=[], final='{"verdict": ' + "x" * 20_000, usage=_usage(0))
    with pytest.raises(StructuredOutputValidationError):
        _run(setup, model, "sync", response_format=ProviderStrategy(_Verdict))
    [outcome] = _model_outcomes(setup)
    assert outcome.status == "error" and UNREAD in outcome.reasons, outcome.reasons
    assert setup.spent()[0] >= LIMIT


def test_a_usage_that_counts_its_answer_is_charged_as_reported(setup: Setup) -> None:
    """The rule's other side: one output token for each ``MAX_CHARS_PER_TOKEN`` characters is a
    usage that can count the answer, charged as reported; so is an empty answer's zero."""
    output = -(-20_000 // MAX_CHARS_PER_TOKEN)
    model = Hostile(turns=[], final="x" * 20_000, usage=_usage(output))
    _run(setup, model, "sync")
    [outcome] = _model_outcomes(setup)
    assert UNREAD not in outcome.reasons, outcome.reasons
    assert setup.spent()[0] == 3 + output


def test_an_empty_answer_reporting_no_output_is_charged_as_reported(setup: Setup) -> None:
    """The rule's other side: nothing answered, nothing output: charged the 3 input tokens."""
    model = Hostile(turns=[], final="", usage=_usage(0))
    _run(setup, model, "sync")
    [outcome] = _model_outcomes(setup)
    assert UNREAD not in outcome.reasons, outcome.reasons
    assert setup.spent()[0] == 3
