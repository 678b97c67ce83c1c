"""A stream that breaks after output that is not text (a tool call fragment, reasoning) is charged
its reservation in process (a gated agent's ``DispatchedChatModel``) as through the gateway:
output was delivered by the rule both read (``carries_output``) (review R58).

Real HTTP on 127.0.0.1 to a raw backend that streams the bytes a test sets, then closes the
connection without ``[DONE]`` (``Scripted``, tests/test_gate_r57_stream_usage.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from test_gate_r57_stream_usage import Scripted
from test_gateway_end_to_end import _body
from test_gateway_hostile_backends import _gateway, _settled
from test_langgraph import _make_team, _tools

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.dispatcher import Dispatcher
from agentgate.dispatch.router import Router
from agentgate.errors import BackendFailed
from agentgate.integrations.langgraph import create_gated_agent

UNREAD = "the call ran but its usage could not be read; charged as reserved"


def _event(delta: dict[str, object]) -> bytes:
    return b"data: " + json.dumps({"choices": [{"index": 0, "delta": delta}]}).encode() + b"\n\n"


CUT_AFTER = {
    "a_tool_call_fragment": _event(
        {"tool_calls": [{"index": 0, "id": "t", "function": {"name": "search_web", "arguments": '{"q"'}}]}
    ),
    "reasoning": _event({"reasoning_content": "Let me think"}),
}


@pytest.fixture
def backend() -> Iterator[Scripted]:
    made = Scripted()
    made.mode = "script"
    yield made
    made.close()


def _agent_outcome(tmp_path: Path, backend: Scripted) -> tuple[str, list[str], bool]:
    """A gated agent's one streamed model call to ``backend``: its outcome's status and reasons,
    and whether the call's reservation is still spent once settled (charged, not released)."""
    team = _make_team(tmp_path)
    try:
        served = {"name": "raw", "url": backend.url, "engine": "vllm", "models": ["scripted"]}
        inventory = inventory_from_mapping({"backends": [served]})
        team.gate.attach_dispatcher(Dispatcher(inventory, Router(inventory), max_attempts=1))
        before = sorted(team.gate.budget_usage(team.supervisor).values())
        agent = create_gated_agent(
            team.gate,
            name="supervisor",
            model=GenericFakeChatModel(messages=iter([])),  # raises if called: the dispatcher serves
            tools=_tools(team),
            model_name="scripted",
            max_tokens=16,
        )
        request = {"messages": [{"role": "user", "content": "go"}]}
        with pytest.raises(BackendFailed, match="broke after output"):
            for _ in agent.stream(request, context=team.supervisor, stream_mode="messages"):
                pass
        team.gate.flush()
        [outcome] = [e for e in team.gate.audit.entries() if e.kind == "outcome"]
        charged = sorted(team.gate.budget_usage(team.supervisor).values()) != before
        return outcome.status, list(outcome.reasons), charged
    finally:
        team.gate.close()


@pytest.mark.parametrize("output", sorted(CUT_AFTER))
def test_a_stream_cut_after_output_that_is_not_text_is_charged_in_process_as_at_the_gateway(
    tmp_path: Path, backend: Scripted, output: str
) -> None:
    """Review R58, a dispatched stream that broke after a tool call fragment or reasoning (no text)
    was released in process, where the gateway charges it its reservation.

    ``DispatchedChatModel`` hands LangChain its text only (tool calls come whole on its last
    chunk, reasoning not at all), so the middleware's watch of what was streamed saw nothing and
    released the call: a free generation. The model now tells the watch when a chunk carries
    output by the dispatcher's and the gateway's rule (``carries_output``)."""
    backend.script = CUT_AFTER[output]
    status, reasons, charged = _agent_outcome(tmp_path / "agent", backend)
    assert (status, reasons[-1], charged) == ("error", UNREAD, True), reasons
    with _gateway(tmp_path / "gateway", backend) as env:
        spent = env.spent()
        answer = env.post(_body(stream=True))
        assert answer.status_code == 200 and '"backend_failed"' in answer.text, answer.text
        outcome = _settled(env, 1)[-1]
        assert (outcome.status, outcome.reasons[-1]) == ("error", UNREAD), outcome.reasons
        assert env.spent() > spent
