"""Review R68: a backend that answers a call whole with a usage that is not token counts.

``BackendClient.chat`` refused such an answer as a plain ``BackendFailed`` ("malformed chat
completion: usage ..."), which the dispatcher fails over on: the next backend ran the call again
(and again, ``max_attempts`` in all), and the caller's reservation was released, nothing charged,
by the Gate (a LangGraph agent's dispatched call) and by the gateway (its 502 said "nothing was
charged"). A backend reporting a negative count made every call free, run three times. Now it is
``UsageUnreadable``: the backend is marked down, the call is sent to no other, and it is charged
its reservation, the outcome saying why. Real HTTP on 127.0.0.1, real Gate, real SQLite store.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from test_dispatch_r61_backend_garbage import (
    AFTER_OUTPUT,
    NAME,
    PAYLOAD,
    STREAMED,
    TIMEOUTS,
    WHOLE,
    Garbage,
    garbage,
)
from test_gate_run import Setup
from test_gateway_end_to_end import _body
from test_gateway_hostile_backends import Hostile, _gateway, _json
from test_langgraph import _make_team, _tools

from agentgate.capabilities import Call
from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.dispatcher import Dispatcher
from agentgate.dispatch.router import Router
from agentgate.errors import BackendFailed, UsageUnreadable
from agentgate.integrations.langgraph import create_gated_agent

garbage = garbage  # the fixture, shared

GARBAGE = {
    "negative": {"prompt_tokens": -5, "completion_tokens": 2},
    "huge": {"prompt_tokens": 10**12, "completion_tokens": 2},
    "fraction": {"prompt_tokens": 3, "completion_tokens": 1.5},
    "text-count": {"prompt_tokens": "7", "completion_tokens": 2},
    "not-an-object": "garbage",
}


class Reporting(Hostile):
    """A backend that answers every chat call "hi", whole, with the usage block ``usage``, then
    closes the connection; it counts the calls it answered."""

    def __init__(self, usage: object) -> None:
        super().__init__()
        self.usage = usage
        self.calls = 0

    async def _answer(self, w: asyncio.StreamWriter, r: asyncio.StreamReader, stream: bool) -> bool:
        self.calls += 1
        choice = {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
        answer = {"id": "c", "object": "chat.completion", "choices": [choice], "usage": self.usage}
        w.write(_json(json.dumps(answer).encode()))
        await w.drain()
        return False  # the connection closed: none is left idle to the end of the test


@pytest.fixture
def backends(request: pytest.FixtureRequest) -> Iterator[list[Reporting]]:
    made = [Reporting(request.param), Reporting(request.param)]
    yield made
    for backend in made:
        backend.close()


def _inventory(backends: list[Reporting]) -> Any:
    served = [
        {"name": f"b{n}", "url": b.url, "engine": "vllm", "models": ["scripted"]}
        for n, b in enumerate(backends)
    ]
    return inventory_from_mapping({"backends": served})


@pytest.mark.parametrize("backends", list(GARBAGE.values()), ids=list(GARBAGE), indirect=True)
async def test_an_answer_with_garbage_usage_is_not_sent_to_another_backend(backends: list[Reporting]) -> None:
    """Review R68: before, the call failed over: both backends ran it (``BackendFailed`` after
    every attempt); now one ran it, ``UsageUnreadable`` says why, and that backend is marked down."""
    inventory = _inventory(backends)
    payload = {"model": "scripted", "messages": [{"role": "user", "content": "go"}], "max_tokens": 4}
    # No background probe or scrape meanwhile: one left in flight at the close is a stray socket.
    quiet = {"scrape_interval_s": 60.0, "health_interval_s": 60.0}
    async with Dispatcher(inventory, Router(inventory), **quiet) as dispatcher:
        with pytest.raises(UsageUnreadable, match="malformed chat completion: usage"):
            await dispatcher.chat(payload)
        assert sum(b.calls for b in backends) == 1
        ran = "b0" if backends[0].calls else "b1"
        assert dispatcher.is_down(ran)


@pytest.mark.parametrize("backends", list(GARBAGE.values()), ids=list(GARBAGE), indirect=True)
def test_a_dispatched_agent_call_answered_with_garbage_usage_is_charged_its_reservation(
    tmp_path: Path, backends: list[Reporting]
) -> None:
    """Review R68: before, the agent's model call ran on both backends and its budget was charged
    0; now it ran once, is charged its reservation, and the outcome says the usage was unread."""
    team = _make_team(tmp_path, budget=1_000_000, unit="tokens")
    try:
        team.gate.attach_dispatcher(Dispatcher(_inventory(backends), Router(_inventory(backends))))
        agent = create_gated_agent(
            team.gate,
            name="supervisor",
            model=GenericFakeChatModel(messages=iter([])),  # raises if called: the dispatcher serves
            tools=_tools(team),
            model_name="scripted",
            max_tokens=16,
        )
        with pytest.raises(UsageUnreadable):
            agent.invoke({"messages": [{"role": "user", "content": "go"}]}, context=team.supervisor)
        team.gate.flush()
        assert sum(b.calls for b in backends) == 1
        [outcome] = [e for e in team.gate.audit.entries() if e.kind == "outcome"]
        [allow] = [
            e for e in team.gate.audit.entries() if e.kind == "allow" and e.resource == outcome.resource
        ]
        [(spent, _)] = team.gate.budget_usage(team.supervisor).values()
        assert spent == allow.budget_delta > 0
        assert outcome.reasons[0].startswith("UsageUnreadable: ")
        assert "charged as reserved" in outcome.reasons[-1]
    finally:
        team.gate.close()


def test_the_gateway_charges_a_call_answered_with_garbage_usage_its_reservation(tmp_path: Path) -> None:
    """Review R68: before, the gateway answered 502 "nothing was charged" and released the
    reservation; now 502 saying the call was charged its reservation, which it is, the backend
    having run the call once."""
    backend = Reporting(GARBAGE["negative"])
    try:
        with _gateway(tmp_path, backend) as env:
            before = env.spent()
            answer = env.post(_body())
            assert answer.status_code == 502, answer.text
            assert answer.json()["error"]["code"] == "backend_failed"
            assert "charged its reservation" in answer.json()["error"]["message"]
            assert backend.calls == 1
            [allow] = [
                e for e in env.gate.audit.entries() if e.kind == "allow" and e.resource.startswith("model:")
            ]
            assert env.spent() - before == allow.budget_delta > 0
            assert env.outcomes()[-1].status == "error" and env.held() == []
    finally:
        backend.close()


@pytest.mark.parametrize("case", sorted(c for c in WHOLE if c.startswith("usage_")))
def test_a_direct_gate_dispatch_answered_with_garbage_usage_is_charged_as_reserved(
    tmp_path: Path, garbage: Garbage, case: str
) -> None:
    """Review R68: through ``Gate.run`` of ``Gate.dispatch``, a whole answer with garbage usage
    was released, nothing charged (review R61 pinned it so); it ran, so it is charged as reserved."""
    garbage.reply = WHOLE[case]
    setup = Setup(tmp_path)
    try:
        inventory = inventory_from_mapping(
            {"backends": [{"name": NAME, "url": garbage.url, "engine": "vllm", "models": ["small"]}]}
        )
        setup.gate.attach_dispatcher(Dispatcher(inventory, Router(inventory), timeouts=TIMEOUTS))
        auth = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(100, 10))
        with pytest.raises(UsageUnreadable, match=NAME):
            setup.gate.run(auth, lambda: setup.gate.dispatch(PAYLOAD))
        setup.gate.flush()
        settled = [setup.gate.ledger.reservation(r) for r, _, _ in auth.reservations]
        assert [(r.state, r.actual) for r in settled] == [
            ("committed", amount) for _, _, amount in auth.reservations
        ]
    finally:
        setup.gate.close()


def dispatched_agent_call(tmp_path: Path, backends: list[Reporting]) -> tuple[int, Any, Any]:
    """A LangGraph agent's one model call dispatched to ``backends``, answered "hi": what its
    budget was charged, its ``allow`` entry and its ``outcome`` entry."""
    team = _make_team(tmp_path, budget=1_000_000, unit="tokens")
    try:
        team.gate.attach_dispatcher(Dispatcher(_inventory(backends), Router(_inventory(backends))))
        agent = create_gated_agent(
            team.gate,
            name="supervisor",
            model=GenericFakeChatModel(messages=iter([])),  # raises if called: the dispatcher serves
            tools=_tools(team),
            model_name="scripted",
            max_tokens=16,
        )
        answer = agent.invoke({"messages": [{"role": "user", "content": "go"}]}, context=team.supervisor)
        assert answer["messages"][-1].content == "hi"
        team.gate.flush()
        [outcome] = [e for e in team.gate.audit.entries() if e.kind == "outcome"]
        [allow] = [
            e for e in team.gate.audit.entries() if e.kind == "allow" and e.resource == outcome.resource
        ]
        [(spent, _)] = team.gate.budget_usage(team.supervisor).values()
        return spent, allow, outcome
    finally:
        team.gate.close()


MISSING = {
    "no-prompt-tokens": {"completion_tokens": 2},
    "null-prompt-tokens": {"prompt_tokens": None, "completion_tokens": 2},
}


@pytest.mark.parametrize("backends", list(MISSING.values()), ids=list(MISSING), indirect=True)
def test_a_dispatched_agent_call_whose_usage_leaves_out_its_prompt_is_charged_its_reservation(
    tmp_path: Path, backends: list[Reporting]
) -> None:
    """Review R68: a usage without ``prompt_tokens`` was read as 0 prompt tokens: the agent's call
    was charged its 2 output tokens, its prompt free. Now it is charged its reservation (the
    answer passed on), its outcome saying no usage was reported, as one without
    ``completion_tokens`` is."""
    spent, allow, outcome = dispatched_agent_call(tmp_path, backends)
    assert spent == allow.budget_delta > 2
    assert list(outcome.reasons) == ["no usage was reported; charged as reserved"]


@pytest.mark.parametrize("usage", list(MISSING.values()), ids=list(MISSING))
def test_the_gateway_charges_a_usage_without_its_prompt_the_reservation(
    tmp_path: Path, usage: object
) -> None:
    """Review R68: the gateway charged such a usage 0 prompt tokens; now its reservation, the
    answer passed on (as for a usage without ``completion_tokens``)."""
    backend = Reporting(usage)
    try:
        with _gateway(tmp_path, backend) as env:
            before = env.spent()
            answer = env.post(_body())
            assert answer.status_code == 200, answer.text
            [allow] = [
                e for e in env.gate.audit.entries() if e.kind == "allow" and e.resource.startswith("model:")
            ]
            assert env.spent() - before == allow.budget_delta > 2
            assert "no usage was reported; charged as reserved" in env.outcomes()[-1].reasons
    finally:
        backend.close()


@pytest.mark.parametrize("case", sorted(AFTER_OUTPUT))
def test_a_direct_gate_stream_that_breaks_after_output_is_charged_as_reserved(
    tmp_path: Path, garbage: Garbage, case: str
) -> None:
    """Review R68: through ``Gate.run`` of ``Gate.dispatch_stream``, a stream that delivered "hi"
    and then went wrong (a garbage usage, no ``[DONE]``, held open) ended in a plain ``BackendFailed`` ("broke after output"), and the
    Gate released the reservation: the output delivered was free (review R61 pinned it so). It
    says ``after_output`` now, and is charged as reserved."""
    if case == "held":
        garbage.mode = case
    else:
        garbage.reply = STREAMED[case]
    setup = Setup(tmp_path)
    try:
        inventory = inventory_from_mapping(
            {"backends": [{"name": NAME, "url": garbage.url, "engine": "vllm", "models": ["small"]}]}
        )
        setup.gate.attach_dispatcher(Dispatcher(inventory, Router(inventory), timeouts=TIMEOUTS))
        auth = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(100, 10))
        with pytest.raises(BackendFailed, match="broke after output") as broke:
            setup.gate.run(auth, lambda: list(setup.gate.dispatch_stream({**PAYLOAD, "stream": True})))
        assert broke.value.after_output
        setup.gate.flush()
        settled = [setup.gate.ledger.reservation(r) for r, _, _ in auth.reservations]
        assert [(r.state, r.actual) for r in settled] == [
            ("committed", amount) for _, _, amount in auth.reservations
        ]
    finally:
        setup.gate.close()
