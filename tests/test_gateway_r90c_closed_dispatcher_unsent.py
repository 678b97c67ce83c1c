"""A call the Dispatcher refuses because it is closed ("the dispatcher is closed"), before any
attempt was made, says ``sent=False``, chat and stream alike, so ``Gate.arun`` settles it as not
started (released, an approval it used pending again), as it does a call given up in line
(regression review of R90c).

The check at the start of ``chat``/``stream`` (``_require_started``) raised its ``NoBackend``
with ``sent`` left true: a model call made to a closed Dispatcher was settled as started, its
approval used up on a call no backend got."""

from __future__ import annotations

import pytest
import test_dispatch_dispatcher
import test_gate_budgets
from test_dispatch_dispatcher import PAYLOAD, Canned, _dispatcher, _inventory
from test_gate_budgets import Books

from agentgate.capabilities import Call
from agentgate.dispatch import Dispatcher
from agentgate.errors import NoBackend
from agentgate.gate._outcomes import never_sent

# Its fixtures, for this module only (a ``pytest_plugins`` entry would reach every module).
canned, books = test_dispatch_dispatcher.canned, test_gate_budgets.books


async def _closed(canned: list[Canned]) -> Dispatcher:
    async with _dispatcher(_inventory(canned)) as dispatcher:
        pass
    return dispatcher


@pytest.mark.parametrize("stream", [False, True], ids=["chat", "stream"])
async def test_a_call_to_a_closed_dispatcher_is_unsent(canned: list[Canned], stream: bool) -> None:
    dispatcher = await _closed(canned)
    with pytest.raises(NoBackend, match="the dispatcher is closed") as raised:
        if stream:
            async for _ in dispatcher.stream(PAYLOAD):
                pass
        else:
            await dispatcher.chat(PAYLOAD)
    assert raised.value.sent is False
    assert sum(server.posts for server in canned) == 0


async def test_gate_settles_a_call_to_a_closed_dispatcher_as_not_started(
    canned: list[Canned], books: Books
) -> None:
    """What ``Gate.arun`` settles by (``never_sent``: released, an approval it used pending
    again); its reservation is released."""
    gate = books.gate
    auth = gate.authorize(books.bot, Call.model("big", {"max_tokens": 10}), tokens=(10, 10))
    assert auth.allowed
    dispatcher = await _closed(canned)

    async def call() -> object:
        return await dispatcher.chat(PAYLOAD)

    with pytest.raises(NoBackend) as raised:
        await gate.arun(auth, call)
    assert never_sent(auth, raised.value)
    gate.flush()
    held = gate.store.query("SELECT COUNT(*) FROM budget_reservations WHERE state = 'reserved'")
    assert held[0][0] == 0
