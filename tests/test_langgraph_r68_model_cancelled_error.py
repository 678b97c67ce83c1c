"""A chat model raising ``CancelledError`` itself (not a cancellation of the run) is settled as a
model call cut while it ran: one ``error`` outcome, charged as reserved (the gate's rule for a
model call a non-``Exception`` ended: it may have generated up to its limit). Unlike a tool's own
``CancelledError`` (review R67: told to the model, which has its next turn), a failing model
call has no turn to give: any exception out of it ends the run, so the run ends here too. A real
cancellation of the run during a model call settles it the same way: one outcome, nothing held."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.errors import NodeCancelledError
from test_langgraph import Team, _entries, _make_team, _tools

from agentgate.integrations.langgraph import create_gated_agent

GO = {"messages": [{"role": "user", "content": "go"}]}


class _OwnTimeout(BaseChatModel):
    """A chat model whose client reports its own timeout as ``CancelledError``; with ``hang`` its
    async call waits until it is cancelled, after ``started`` is set."""

    hang: bool = False
    started: Any = None

    @property
    def _llm_type(self) -> str:
        return "own-timeout"

    def bind_tools(self, tools: Any, **kwargs: Any) -> _OwnTimeout:  # type: ignore[override]
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        raise asyncio.CancelledError("my own timeout")

    async def _agenerate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        if self.hang:
            self.started.set()
            await asyncio.sleep(30)
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content="never"))])
        raise asyncio.CancelledError("my own timeout")


def _agent(team: Team, model: BaseChatModel) -> Any:
    return create_gated_agent(
        team.gate, name="supervisor", model=model, model_name="scripted", tools=_tools(team)
    )


def _model_outcomes(team: Team) -> list[tuple[str | None, str]]:
    return [(e.status, e.reasons[0]) for e in _entries(team.gate) if e.kind == "outcome"]


def _reservations(team: Team) -> list[str]:
    return [state for (state,) in team.gate.store.query("SELECT state FROM budget_reservations")]


def test_a_models_own_cancelled_error_under_invoke_is_one_error_outcome_charged_as_reserved(
    tmp_path: Path,
) -> None:
    """Review R68 (pinned, not changed): under ``invoke`` nothing can cancel a model call, so a
    ``CancelledError`` is the model's own; the run ends (LangGraph's ``NodeCancelledError``), as
    on any exception of a model call, after one ``error`` outcome charged as reserved."""
    team = _make_team(tmp_path)
    try:
        with pytest.raises(NodeCancelledError):
            _agent(team, _OwnTimeout()).invoke(GO, context=team.supervisor)
        assert _model_outcomes(team) == [("error", "CancelledError")]
        assert _reservations(team) == ["committed"]
    finally:
        team.gate.close()


async def test_a_models_own_cancelled_error_under_ainvoke_reaches_the_gate_as_langchains_error(
    tmp_path: Path,
) -> None:
    """Review R68 (pinned): under ``ainvoke`` LangChain's ``agenerate`` (langchain-core 1.8)
    turns a model's own ``CancelledError`` into an ``AttributeError`` of its own before the
    middleware sees it; the call is settled as that error, once, its reservation not held. If a
    LangChain release lets the ``CancelledError`` through, this test says so."""
    team = _make_team(tmp_path)
    try:
        with pytest.raises(AttributeError, match="generations"):
            await _agent(team, _OwnTimeout()).ainvoke(GO, context=team.supervisor)
        assert _model_outcomes(team) == [("error", "AttributeError")]
        assert "reserved" not in _reservations(team)
    finally:
        team.gate.close()


async def test_a_real_cancellation_during_a_model_call_settles_it_once(tmp_path: Path) -> None:
    """Review R68: the run cancelled while its model call runs ends cancelled; the call has one
    ``error`` outcome, charged as reserved, and no reservation is left held."""
    team = _make_team(tmp_path)
    started = asyncio.Event()
    try:
        task = asyncio.create_task(
            _agent(team, _OwnTimeout(hang=True, started=started)).ainvoke(GO, context=team.supervisor)
        )
        await asyncio.wait_for(started.wait(), 10)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert task.cancelled()
        assert _model_outcomes(team) == [("error", "CancelledError")]
        assert _reservations(team) == ["committed"]
    finally:
        team.gate.close()
