"""Review R67: a model call dispatched in-process is charged at most the prompt it sent can hold.

The gateway bounds a call's prompt by its body (``_prompt_most``: one token a byte, plus
``PROMPT_TEMPLATE_TOKENS``, plus ``MEDIA_PART_TOKENS_MOST`` a media part), and charges a backend's
report of more at that bound, recording the report. A LangGraph agent's model call served by the
Gate's own dispatcher (``Gate.dispatch``, ``DispatchedChatModel``) charged the prompt tokens as
reported: a backend reporting 100,000,000 of them for a two-word prompt spent the caller's budget.
A real ``Gate`` with an attached dispatcher, over real HTTP on 127.0.0.1 to the inflating backend
of ``test_gateway_r67_prompt_bound``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessageChunk
from test_gateway_r67_prompt_bound import _REPORTED, Inflating
from test_langgraph import _make_team, _tools

from agentgate.capabilities import Call
from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.dispatcher import Dispatcher
from agentgate.dispatch.prefix import PROMPT_TEMPLATE_TOKENS, prompt_tokens_most
from agentgate.dispatch.router import Router
from agentgate.errors import InputError
from agentgate.integrations.langgraph import create_gated_agent

_BUDGET = 1_000_000


@pytest.fixture
def backend() -> Iterator[Inflating]:
    made = Inflating()
    yield made
    made.close()


def _agent_spends(tmp_path: Path, backend: Inflating, stream: bool) -> tuple[int, list[str]]:
    """The tokens a gated agent whose one model call the inflating backend answers spends, and
    the reasons of that call's outcome."""
    team = _make_team(tmp_path, budget=_BUDGET, unit="tokens")
    try:
        served = {"name": "inflating", "url": backend.url, "engine": "vllm", "models": ["scripted"]}
        inventory = inventory_from_mapping({"backends": [served]})
        team.gate.attach_dispatcher(Dispatcher(inventory, Router(inventory)))
        agent = create_gated_agent(
            team.gate,
            name="supervisor",
            model=GenericFakeChatModel(messages=iter([])),  # raises if called: the dispatcher serves
            tools=_tools(team),
            model_name="scripted",
            max_tokens=16,
        )
        request = {"messages": [{"role": "user", "content": "go"}]}
        if stream:
            pieces = [m for m, _ in agent.stream(request, context=team.supervisor, stream_mode="messages")]
            assert "".join(str(p.content) for p in pieces if isinstance(p, AIMessageChunk)) == "hi"
        else:
            assert agent.invoke(request, context=team.supervisor)["messages"][-1].content == "hi"
        team.gate.flush()
        [outcome] = [e for e in team.gate.audit.entries() if e.kind == "outcome"]
        [(spent, _)] = team.gate.budget_usage(team.supervisor).values()
        return spent, list(outcome.reasons)
    finally:
        team.gate.close()


@pytest.mark.parametrize("stream", [False, True], ids=["answer", "stream"])
def test_a_dispatched_call_is_charged_at_most_what_its_payload_can_hold(
    tmp_path: Path, backend: Inflating, stream: bool
) -> None:
    """Review R67: before, the agent's budget was charged the 100,000,000 prompt tokens the
    backend reported (its whole 1,000,000); now at most the payload's bytes (its tools' schemas
    among them) plus the template allowance, and the outcome says what the backend reported."""
    spent, reasons = _agent_spends(tmp_path, backend, stream)
    assert 0 < spent <= 20_000 + PROMPT_TEMPLATE_TOKENS, spent
    reason = next(r for r in reasons if "prompt tokens" in r)
    assert f"the backend reported {_REPORTED} prompt tokens" in reason
    assert f"charged {spent - 2}" in reason


@pytest.mark.parametrize("most", [-1, True, 2.5, "100"])
def test_a_prompt_bound_that_is_not_a_count_is_an_input_error(tmp_path: Path, most: object) -> None:
    """Review R67: ``Gate.authorize(prompt_most=)`` (what a direct caller of ``Gate.dispatch``
    passes, ``prompt_tokens_most`` of its payload) takes a non-negative integer; anything else is
    an ``InputError`` naming it, with nothing recorded."""
    team = _make_team(tmp_path, budget=_BUDGET, unit="tokens")
    try:
        before = len(list(team.gate.audit.entries()))
        with pytest.raises(InputError, match="prompt_most must be a non-negative integer"):
            team.gate.authorize(
                team.supervisor, Call.model("scripted", {"max_tokens": 4}), tokens=(5, 4), prompt_most=most
            )
        assert len(list(team.gate.audit.entries())) == before
    finally:
        team.gate.close()


def test_a_direct_dispatch_decided_with_its_bound_is_charged_at_most_it(
    tmp_path: Path, backend: Inflating
) -> None:
    """Review R67: the bound a direct caller of ``Gate.dispatch`` passes to ``Gate.authorize`` caps
    the prompt its outcome is charged (before, there was no way to pass one)."""
    team = _make_team(tmp_path, budget=_BUDGET, unit="tokens")
    try:
        served = {"name": "inflating", "url": backend.url, "engine": "vllm", "models": ["scripted"]}
        inventory = inventory_from_mapping({"backends": [served]})
        team.gate.attach_dispatcher(Dispatcher(inventory, Router(inventory)))
        payload = {"model": "scripted", "messages": [{"role": "user", "content": "go"}], "max_tokens": 4}
        most = prompt_tokens_most(len(json.dumps(payload)), payload)
        call = Call.model("scripted", {"max_tokens": 4})
        auth = team.gate.authorize(team.supervisor, call, tokens=(5, 4), prompt_most=most)
        answer = team.gate.run(
            auth,
            lambda: team.gate.dispatch(payload),
            spent=lambda r: (r.usage.prompt_tokens, r.usage.completion_tokens),
        )
        assert answer.usage.prompt_tokens == _REPORTED  # the backend's report, as it sent it
        [(spent, _)] = team.gate.budget_usage(team.supervisor).values()
        assert spent == most + 2
    finally:
        team.gate.close()
