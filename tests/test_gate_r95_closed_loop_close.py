"""Review R95: ``Gate.close`` waited its whole ``timeout_s`` for an ``arun`` call whose event loop
was closed under it (``loop.close()`` cancels no task): a call that never ends. It now leaves
such calls out of its wait, as it does its own loop's, logs them, and their slot goes back."""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path

import pytest
from test_gate_r89_identity_fields import policy_text

from agentgate.capabilities import Call
from agentgate.gate import Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore
from agentgate.tasks import SchedulerConfig, ToolLimits

WAIT_S = 10.0
KEYS = {name: SigningKey.generate() for name in ("root", "agent")}


def test_close_does_not_wait_for_a_call_whose_loop_was_closed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    gate = Gate(
        parse_policy(policy_text(KEYS, budget="")),
        SQLiteStore(tmp_path / "g.db"),
        scheduler=SchedulerConfig(tools={"lookup": ToolLimits(concurrency=1, timeout_s=None)}),
    )
    agent = gate.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="worker")
    kept: list[asyncio.Task[None]] = []

    def run_then_close_loop() -> None:
        loop = asyncio.new_event_loop()

        async def start() -> None:
            entered = asyncio.Event()

            async def hold() -> None:
                entered.set()
                await asyncio.Event().wait()

            auth = gate.authorize(agent, Call.tool("lookup", {"id": "A"}))
            kept.append(asyncio.ensure_future(gate.arun(auth, hold)))
            await entered.wait()

        loop.run_until_complete(start())
        loop.close()  # the call never ends

    thread = threading.Thread(target=run_then_close_loop)
    thread.start()
    thread.join(WAIT_S)
    assert not thread.is_alive()

    closer = threading.Thread(target=lambda: gate.close(timeout_s=3600))
    with caplog.at_level(logging.ERROR, logger="agentgate.gate"):
        closer.start()
        closer.join(WAIT_S)  # a guard: it waited the whole hour
        assert not closer.is_alive()
    assert "1 arun calls of event loops closed under them, which never end" in caplog.text
    assert gate._limits.tool_in_flight == {}
    kept.clear()
