"""The tenant a model call is dispatched under (``Gate.dispatch``, ``adispatch``,
``dispatch_stream``, ``adispatch_stream``, ``DispatchedChatModel(tenant=...)``) is a name as
``Gate.issue`` takes one: non-empty, at most ``MAX_AGENT_NAME_CHARS`` characters of one line of
visible text. It keys the dispatcher's token buckets and labels its metrics, so anything else is
an ``InputError`` naming the tenant, and the dispatcher is never handed the call."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentgate.dispatch._answers import ChatChunk
from agentgate.errors import InputError
from agentgate.gate import MAX_AGENT_NAME_CHARS, Gate
from agentgate.integrations.langgraph import DispatchedChatModel

PAYLOAD = {"model": "m", "messages": [{"role": "user", "content": "hello"}]}


class _Recording:
    """A dispatcher that serves every call and records the tenant it was handed."""

    def __init__(self) -> None:
        self.model_slo_ttft_s: dict[str, float] = {}
        self.tenants: list[str] = []

    async def start(self) -> None:
        return None

    async def aclose(self) -> None:
        return None

    async def chat(self, payload: Any, *, tenant: str, session: str | None) -> str:
        self.tenants.append(tenant)
        return "served"

    async def stream(self, payload: Any, *, tenant: str, session: str | None) -> AsyncIterator[ChatChunk]:
        self.tenants.append(tenant)
        yield ChatChunk("chunk")  # a chunk as the dispatcher streams it (its size read, since R94)


async def _collect(chunks: AsyncIterator[Any]) -> list[Any]:
    return [chunk async for chunk in chunks]


_CALLS: dict[str, Callable[[Gate, Any], object]] = {
    "dispatch": lambda gate, tenant: gate.dispatch(PAYLOAD, tenant=tenant),
    "adispatch": lambda gate, tenant: asyncio.run(gate.adispatch(PAYLOAD, tenant=tenant)),
    "dispatch_stream": lambda gate, tenant: list(gate.dispatch_stream(PAYLOAD, tenant=tenant)),
    "adispatch_stream": lambda gate, tenant: asyncio.run(
        _collect(gate.adispatch_stream(PAYLOAD, tenant=tenant))
    ),
}

_NOT_NAMES = [
    pytest.param(
        "x" * (MAX_AGENT_NAME_CHARS + 1), f"at most {MAX_AGENT_NAME_CHARS} characters", id="too-long"
    ),
    pytest.param("acme\nteam", "U+000A", id="line-break"),
    pytest.param("acme\u202eemca", "U+202E", id="bidi-override"),
    pytest.param("acme\u200b", "U+200B", id="invisible"),
    pytest.param("acme\ud800", "valid Unicode", id="lone-surrogate"),
    pytest.param("", "non-empty text", id="empty"),
    pytest.param(7, "non-empty text", id="not-text"),
]


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[tuple[Gate, _Recording]]:
    (tmp_path / "policy.yaml").write_text("version: 1\n")
    dispatcher = _Recording()
    with Gate.open(tmp_path / "policy.yaml", store=str(tmp_path / "gate.db")) as opened:
        opened.attach_dispatcher(dispatcher)  # type: ignore[arg-type]
        yield opened, dispatcher


@pytest.mark.parametrize("call", list(_CALLS))
@pytest.mark.parametrize(("tenant", "said"), _NOT_NAMES)
def test_a_dispatched_calls_tenant_that_is_no_name_is_refused_before_the_dispatcher(
    gate: tuple[Gate, _Recording], call: str, tenant: object, said: str
) -> None:
    """Review R56: Gate.dispatch's tenant took any text into the dispatcher's quota buckets and metric labels."""
    opened, dispatcher = gate
    with pytest.raises(InputError, match="tenant") as refused:
        _CALLS[call](opened, tenant)
    assert said in str(refused.value)
    assert dispatcher.tenants == []


@pytest.mark.parametrize("call", list(_CALLS))
def test_a_dispatched_calls_tenant_that_is_a_name_is_handed_on_as_it_is(
    gate: tuple[Gate, _Recording], call: str
) -> None:
    opened, dispatcher = gate
    for tenant in ["default", "acme-eu.1", "Forscher-für-Räume", "x" * MAX_AGENT_NAME_CHARS]:
        _CALLS[call](opened, tenant)
    assert dispatcher.tenants == ["default", "acme-eu.1", "Forscher-für-Räume", "x" * MAX_AGENT_NAME_CHARS]


@pytest.mark.parametrize(("tenant", "said"), _NOT_NAMES)
def test_a_dispatched_chat_models_tenant_that_is_no_name_is_refused_when_it_is_made(
    tenant: object, said: str
) -> None:
    """Review R56: DispatchedChatModel(tenant=...) took any text, refused by nobody until the dispatcher used it."""
    with pytest.raises(InputError, match="tenant") as refused:
        DispatchedChatModel(gate=None, model_name="m", tenant=tenant)
    assert said in str(refused.value)
    assert DispatchedChatModel(gate=None, model_name="m", tenant="acme").tenant == "acme"
