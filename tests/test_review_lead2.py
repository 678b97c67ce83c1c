"""Defects found by the third review round (R22-R29) whose fixes lie outside the reviewers' paths
(agentgate/gate/, the lead's): each test failed on the code before its fix."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from test_langgraph import NAMES, _calls, _entries, _policy_text, _tool_messages

from agentgate.gate import Gate
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

GO = {"messages": [{"role": "user", "content": "go"}]}


async def test_a_tool_call_cancelled_while_it_waited_for_a_slot_runs_when_the_thread_is_resumed(
    tmp_path: Path,
) -> None:
    # search is not idempotent here, with a concurrency of 2. Three parallel calls: two run and
    # hold both slots, the third waits for one. The run is cancelled. The third call never
    # started, yet its once-only key is marked "error" (ran and failed), so resuming the thread
    # refuses it: "already ran and failed ... it may have had its effect", and `agentgate tasks
    # unsettled` lists it for a person to settle.
    keys = {n: SigningKey.generate() for n in NAMES}
    text = _policy_text({n: k.did for n, k in keys.items()}, 1_000_000).replace(
        "idempotent: true", "idempotent: false"
    )
    gate = Gate(parse_policy(text, source="team.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    supervisor = gate.issue(keys["root"], name="supervisor", key=keys["supervisor"], role="supervisor")
    ran: list[str] = []
    hold = asyncio.Event()

    async def search(query: str) -> str:
        ran.append(query)
        await hold.wait()
        return f"results for {query}"

    tool = StructuredTool.from_function(coroutine=search, name="search", description="search")
    try:
        agent = create_gated_agent(
            gate,
            name="supervisor",
            model=ScriptedChatModel(
                turns=[
                    _calls(
                        ("search", {"query": "a"}), ("search", {"query": "b"}), ("search", {"query": "late"})
                    )
                ]
            ),
            tools=[tool],
            checkpointer=InMemorySaver(),
            gate_models=False,
        )
        config = {"configurable": {"thread_id": "t"}}
        task = asyncio.create_task(agent.ainvoke(GO, config, context=supervisor))
        while len(ran) < 2:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)  # "late" is queued for a slot
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        hold.set()
        assert len(ran) == 2
        (waited,) = {"a", "b", "late"} - set(ran)
        resumed = await agent.ainvoke(None, config, context=supervisor)
        answers = {m.tool_call_id: str(m.content)[:120] for m in _tool_messages(resumed)}
        assert waited in ran[2:], answers  # the call that never started runs when resumed
        assert [e.status for e in _entries(gate) if e.kind == "outcome"].count("ok") == 1
    finally:
        gate.close()
