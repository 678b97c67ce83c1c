"""A streamed model call in-process is charged by the gateway's rule (``_StreamUsage``): a usage
counts the output sent with it and before it, so output after the last usage reported makes it
stale, and the call is charged its reservation (review R57).

A real ``Gate`` with an attached dispatcher, over real HTTP on 127.0.0.1 to a raw backend
(``Hostile``, tests/test_gateway_hostile_backends.py) that streams the bytes a test sets."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessageChunk, HumanMessage
from test_dispatched_streaming import _added_up, _gate
from test_gateway_hostile_backends import _SSE, Hostile, _chunk
from test_langgraph import _make_team, _tools

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.dispatcher import Dispatcher
from agentgate.dispatch.router import Router
from agentgate.integrations.langgraph import DispatchedChatModel, create_gated_agent


class Scripted(Hostile):
    """``Hostile`` answering a streamed call, in mode ``script``, with the bytes ``script``."""

    script = b""

    async def _answer(self, w: asyncio.StreamWriter, r: asyncio.StreamReader, stream: bool) -> bool:
        if self.mode != "script" or not stream:
            return await super()._answer(w, r, stream)
        w.write(_SSE + self.script)
        await w.drain()
        return False


@pytest.fixture
def backend() -> Iterator[Scripted]:
    made = Scripted()
    made.mode = "script"
    yield made
    made.close()


def _usage(prompt: int, completion: int, content: str | None = None) -> bytes:
    choices = [] if content is None else [{"index": 0, "delta": {"content": content}}]
    event = {"choices": choices, "usage": {"prompt_tokens": prompt, "completion_tokens": completion}}
    return b"data: " + json.dumps(event).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"
STALE = {
    "zero_usage_first": _usage(0, 0) + _chunk("a") * 5 + DONE,
    "zero_usage_with_the_first_chunk": _usage(0, 0, "a") + _chunk("a") * 4 + DONE,
    "a_usage_between_outputs": _chunk("a") + _usage(9, 1) + _chunk("a") * 4 + DONE,
}


def _streamed(model: DispatchedChatModel, how: str) -> AIMessageChunk:
    if how == "sync":
        chunks = list(model.stream([HumanMessage("hi")]))
    else:

        async def collect() -> list[Any]:
            return [chunk async for chunk in model.astream([HumanMessage("hi")])]

        chunks = asyncio.run(collect())
    return _added_up(chunks)


@pytest.mark.parametrize("how", ["sync", "async"])
@pytest.mark.parametrize("script", sorted(STALE))
def test_a_usage_followed_by_output_is_not_the_streamed_answers_usage(
    tmp_path: Path, backend: Scripted, script: str, how: str
) -> None:
    """Review R57, a usage reported before more output was the in-process stream's usage: zero.

    ``DispatchedChatModel`` (``Gate.dispatch_stream`` / ``adispatch_stream``) kept the last usage
    seen, so a backend reporting ``{"prompt_tokens": 0, "completion_tokens": 0}`` first, then
    streaming its answer, gave the answer a usage of zero, which the middleware charged."""
    backend.script = STALE[script]
    with _gate(tmp_path, backend.url, metrics=False) as gate:
        whole = _streamed(DispatchedChatModel(gate=gate, model_name="llama-3.1-8b", max_tokens=32), how)
    assert whole.content == "aaaaa"
    assert whole.usage_metadata is None  # stale: the call is charged its reservation


def test_a_usage_reported_with_or_after_the_last_output_is_the_answers(
    tmp_path: Path, backend: Scripted
) -> None:
    """The rule's other side: a usage sent after the last output counts it, however many came before."""
    backend.script = _usage(0, 0) + _chunk("a") * 4 + _usage(3, 4, "a") + DONE
    with _gate(tmp_path, backend.url, metrics=False) as gate:
        whole = _streamed(DispatchedChatModel(gate=gate, model_name="llama-3.1-8b", max_tokens=32), "sync")
    assert whole.content == "aaaaa"
    assert whole.usage_metadata == {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7}


def _agent_spends(
    tmp_path: Path, backend: Scripted, script: bytes
) -> tuple[list[tuple[int, int]], list[str]]:
    """What a gated agent whose one model call streams ``script`` (``stream_mode="messages"``)
    spends, and the reasons of that call's outcome."""
    backend.script = script
    team = _make_team(tmp_path)
    try:
        served = {"name": "raw", "url": backend.url, "engine": "vllm", "models": ["scripted"]}
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
        pieces = [m for m, _ in agent.stream(request, context=team.supervisor, stream_mode="messages")]
        assert "".join(str(p.content) for p in pieces if isinstance(p, AIMessageChunk)) == "aaaaa"
        team.gate.flush()
        [outcome] = [e for e in team.gate.audit.entries() if e.kind == "outcome"]
        return sorted(team.gate.budget_usage(team.supervisor).values()), list(outcome.reasons)
    finally:
        team.gate.close()


def test_an_agent_streaming_output_after_its_usage_is_charged_its_reservation(
    tmp_path: Path, backend: Scripted
) -> None:
    """Review R57, a gated agent's streamed model call whose usage came before its output was charged
    that usage (zero) in-process, where the gateway charged the same stream its reservation."""
    stale = _agent_spends(tmp_path / "stale", backend, STALE["zero_usage_first"])
    unreported = _agent_spends(tmp_path / "none", backend, _chunk("a") * 5 + DONE)
    # Since review R58 in the gateway's words for the same stream (test_gateway_r58_stale_usage_reason).
    assert "the call ran but its usage could not be read; charged as reserved" in stale[1]
    assert stale[0] == unreported[0]  # charged as reserved, as a stream reporting no usage is
    assert stale[0][0][0] > 0
