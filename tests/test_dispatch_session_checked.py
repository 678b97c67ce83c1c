"""A session given to ``Dispatcher.chat`` or ``Dispatcher.stream`` directly is checked as
``Gate.dispatch`` checks it (``check_session``: ``None`` or valid Unicode text of at most
``MAX_SESSION_CHARS`` characters), in ``Dispatcher.route_request``, before any backend is asked
or any affinity is kept."""

from __future__ import annotations

import asyncio

import pytest
from test_gate_dispatch_tenants import PAYLOAD, _collect

from agentgate._names import MAX_SESSION_CHARS
from agentgate.dispatch import Dispatcher, inventory_from_mapping
from agentgate.dispatch.router import Router
from agentgate.errors import InputError

INVENTORY = inventory_from_mapping(
    {"backends": [{"name": "b", "url": "http://127.0.0.1:9", "engine": "vllm", "models": ["m"]}]}
)


@pytest.mark.parametrize("verb", ["chat", "stream"])
@pytest.mark.parametrize(
    ("session", "said"),
    [
        pytest.param("s" * 300, "session must be at most 200 characters, got 300", id="300-characters"),
        pytest.param(7, "session must be text or None, got 7", id="an-int"),
        pytest.param(["thread-1"], "session must be text or None, got a list", id="a-list"),
        pytest.param("thread\ud800", "session must be valid Unicode text", id="lone-surrogate"),
    ],
)
def test_a_dispatcher_called_directly_refuses_a_session_that_is_no_id(
    verb: str, session: object, said: str
) -> None:
    """Review R57: Dispatcher.chat and stream called directly took any session (any object, text of any length) as a key of the router's affinity map."""

    async def call() -> None:
        async with Dispatcher(INVENTORY, Router(INVENTORY)) as dispatcher:
            if verb == "chat":
                await dispatcher.chat(PAYLOAD, session=session)
            else:
                await _collect(dispatcher.stream(PAYLOAD, session=session))

    with pytest.raises(InputError, match="session") as refused:
        asyncio.run(call())
    assert said in str(refused.value)


@pytest.mark.parametrize("session", [None, "thread-1", "Gespräch 7\u200b", "s" * MAX_SESSION_CHARS])
def test_a_session_that_is_an_id_is_routed_as_it_is(session: str | None) -> None:
    dispatcher = Dispatcher(INVENTORY, Router(INVENTORY))
    assert dispatcher.route_request(PAYLOAD, session=session).session == session
