"""The names a model call is dispatched under, wherever they enter: a ``session`` given to
``Gate.dispatch`` and its twins is an id (``None`` or valid Unicode text, at most
``MAX_SESSION_CHARS`` characters), a tenant given to ``Dispatcher.chat`` or ``stream`` directly
is a name (``check_tenant``), and a ``DispatchedChatModel`` copied with another tenant is checked
before it asks the gate; ``DispatchedChatModel`` names a thread id the gate would refuse as a
session by its digest."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from test_gate_dispatch_tenants import PAYLOAD, _collect

from agentgate.dispatch import Dispatcher, inventory_from_mapping
from agentgate.dispatch._answers import ChatChunk
from agentgate.dispatch.router import Router
from agentgate.errors import InputError
from agentgate.gate import Gate
from agentgate.gate._dispatching import MAX_SESSION_CHARS
from agentgate.integrations.langgraph import DispatchedChatModel, _models


class _Sessions:
    """A dispatcher that serves every call and records the session it was handed."""

    def __init__(self) -> None:
        self.model_slo_ttft_s: dict[str, float] = {}
        self.sessions: list[str | None] = []

    async def start(self) -> None:
        return None

    async def aclose(self) -> None:
        return None

    async def chat(self, payload: Any, *, tenant: str, session: str | None) -> str:
        self.sessions.append(session)
        return "served"

    async def stream(self, payload: Any, *, tenant: str, session: str | None) -> AsyncIterator[ChatChunk]:
        self.sessions.append(session)
        yield ChatChunk("chunk")  # a chunk as the dispatcher streams it (its size read, since R94)


_CALLS: dict[str, Callable[[Gate, Any], object]] = {
    "dispatch": lambda gate, session: gate.dispatch(PAYLOAD, session=session),
    "adispatch": lambda gate, session: asyncio.run(gate.adispatch(PAYLOAD, session=session)),
    "dispatch_stream": lambda gate, session: list(gate.dispatch_stream(PAYLOAD, session=session)),
    "adispatch_stream": lambda gate, session: asyncio.run(
        _collect(gate.adispatch_stream(PAYLOAD, session=session))
    ),
}


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[tuple[Gate, _Sessions]]:
    (tmp_path / "policy.yaml").write_text("version: 1\n")
    dispatcher = _Sessions()
    with Gate.open(tmp_path / "policy.yaml", store=str(tmp_path / "gate.db")) as opened:
        opened.attach_dispatcher(dispatcher)  # type: ignore[arg-type]
        yield opened, dispatcher


@pytest.mark.parametrize("call", list(_CALLS))
@pytest.mark.parametrize(
    ("session", "said"),
    [
        pytest.param("s" * (MAX_SESSION_CHARS + 1), "at most 200 characters, got 201", id="too-long"),
        pytest.param("s" * 1_000_000, "got 1,000,000", id="a-megabyte"),
        pytest.param("thread\ud800", "valid Unicode text", id="lone-surrogate"),
        pytest.param(7, "text or None", id="not-text"),
    ],
)
def test_a_dispatched_calls_session_that_is_no_id_is_refused_before_the_dispatcher(
    gate: tuple[Gate, _Sessions], call: str, session: object, said: str
) -> None:
    """Review R57: Gate.dispatch's session took any object, and text of any length was kept as a
    key of the router's affinity map (up to 100,000 of them)."""
    opened, dispatcher = gate
    with pytest.raises(InputError, match="session") as refused:
        _CALLS[call](opened, session)
    assert said in str(refused.value)
    assert dispatcher.sessions == []


@pytest.mark.parametrize("call", list(_CALLS))
def test_a_dispatched_calls_session_that_is_an_id_is_handed_on_as_it_is(
    gate: tuple[Gate, _Sessions], call: str
) -> None:
    opened, dispatcher = gate
    sessions = [None, "thread-1", "Gespräch 7\u200b", "s" * MAX_SESSION_CHARS]
    for session in sessions:
        _CALLS[call](opened, session)
    assert dispatcher.sessions == sessions


@pytest.mark.parametrize("verb", ["chat", "stream"])
@pytest.mark.parametrize("tenant", ["t" * 201, "acme\nteam", "acme\u202e", "", 7])
def test_a_dispatcher_called_directly_refuses_a_tenant_that_is_no_name(verb: str, tenant: object) -> None:
    """Review R57: Dispatcher.chat (and stream) called directly took any tenant into its quota
    buckets and metric labels; Gate.dispatch checked it, the dispatcher itself did not."""
    inventory = inventory_from_mapping(
        {"backends": [{"name": "b", "url": "http://127.0.0.1:9", "engine": "vllm", "models": ["m"]}]}
    )

    async def call() -> None:
        async with Dispatcher(inventory, Router(inventory)) as dispatcher:
            if verb == "chat":
                await dispatcher.chat(PAYLOAD, tenant=tenant)
            else:
                await _collect(dispatcher.stream(PAYLOAD, tenant=tenant))

    with pytest.raises(InputError, match="tenant"):
        asyncio.run(call())


class _Asked:
    """Stands in for a gate: records what a chat model asks it, answers nothing."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str | None]] = []

    def dispatch(self, payload: Any, *, tenant: str, session: str | None) -> Any:
        self.asked.append((tenant, session))
        raise RuntimeError("asked")


@pytest.mark.parametrize("tenant", ["t" * 201, "acme\nteam", "", None])
def test_a_chat_model_copied_with_a_tenant_that_is_no_name_refuses_before_asking_the_gate(
    tenant: object,
) -> None:
    """Review R57: model_copy(update={"tenant": ...}) runs no pydantic validator, so the copy
    handed any tenant to whatever stood in for the gate."""
    asked = _Asked()
    model = DispatchedChatModel(gate=asked, model_name="m").model_copy(update={"tenant": tenant})
    with pytest.raises(InputError, match="tenant"):
        model.invoke([HumanMessage("hello")])
    assert asked.asked == []


def test_a_chat_model_names_a_thread_id_the_gate_refuses_as_a_session_by_its_digest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A LangGraph thread id of any length or text still gives its run one session (the
    gate takes none over 200 characters or holding a lone surrogate)."""
    asked = _Asked()
    model = DispatchedChatModel(gate=asked, model_name="m")
    for thread in ("thread-1", "t" * MAX_SESSION_CHARS, "t" * 5000, "thread\ud800"):
        monkeypatch.setattr(
            _models, "get_config", lambda thread=thread: {"configurable": {"thread_id": thread}}
        )
        with pytest.raises(RuntimeError, match="asked"):
            model.invoke([HumanMessage("hello")])
    sessions = [session for _, session in asked.asked]
    assert sessions[:2] == ["thread-1", "t" * MAX_SESSION_CHARS]
    assert all(s is not None and s.startswith("sha256:") and len(s) == 71 for s in sessions[2:])
    assert sessions[2] != sessions[3]
