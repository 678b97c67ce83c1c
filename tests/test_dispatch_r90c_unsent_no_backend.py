"""Regression review of R90b: a ``NoBackend`` (or ``Shed``) the Dispatcher raises before any
attempt was made says ``sent=False``, over any transport, so ``Gate.arun`` settles the call as not
started; one raised after a failed attempt keeps ``sent=True``.

R90b had only the gateway mark such a call unsent, and only for a model whose every backend is
plain http (its pool sees what is sent): one with an https backend, or a library caller's
Dispatcher under ``Gate.arun``, was settled as started, its approval used up on a call no backend
got. The Dispatcher knows no attempt was made (none failed: ``_wait_for_plan``'s ``errors`` is
empty) and now says so.
"""

from __future__ import annotations

import pytest
import test_dispatch_dispatcher
import test_gate_budgets
from test_dispatch_dispatcher import PAYLOAD, Canned, _dispatcher, _inventory
from test_gate_budgets import Books

from agentgate.capabilities import Call
from agentgate.errors import NoBackend
from agentgate.gate._outcomes import never_sent

# Its fixtures, for this module only (a ``pytest_plugins`` entry would reach every module).
canned, books = test_dispatch_dispatcher.canned, test_gate_budgets.books


@pytest.mark.parametrize("stream", [False, True], ids=["chat", "stream"])
async def test_no_backend_before_any_attempt_is_unsent(canned: list[Canned], stream: bool) -> None:
    async with _dispatcher(_inventory(canned)) as dispatcher:
        with pytest.raises(NoBackend, match="may use none") as raised:
            if stream:
                async for _ in dispatcher.stream(PAYLOAD, allowed=lambda b: False):
                    pass
            else:
                await dispatcher.chat(PAYLOAD, allowed=lambda b: False)
    assert raised.value.sent is False
    assert sum(server.posts for server in canned) == 0


async def test_no_backend_after_a_failed_attempt_stays_sent(canned: list[Canned]) -> None:
    for server in canned:
        server.answer = {"choices": "garbage"}
    async with _dispatcher(_inventory(canned)) as dispatcher:
        with pytest.raises(NoBackend, match="after:") as raised:
            await dispatcher.chat(PAYLOAD, slo_ttft_s=30.0, priority=0)
    assert raised.value.sent is True


async def test_gate_reads_a_dispatchers_no_backend_before_any_attempt_as_never_sent(
    canned: list[Canned], books: Books
) -> None:
    """What ``Gate.arun`` settles by (``never_sent``: released, an approval it used pending
    again); its reservation is released."""
    gate = books.gate
    auth = gate.authorize(books.bot, Call.model("big", {"max_tokens": 10}), tokens=(10, 10))
    assert auth.allowed
    async with _dispatcher(_inventory(canned)) as dispatcher:

        async def call() -> object:
            return await dispatcher.chat(PAYLOAD, allowed=lambda b: False)

        with pytest.raises(NoBackend) as raised:
            await gate.arun(auth, call)
    assert never_sent(auth, raised.value)
    gate.flush()
    held = gate.store.query("SELECT COUNT(*) FROM budget_reservations WHERE state = 'reserved'")
    assert held[0][0] == 0
