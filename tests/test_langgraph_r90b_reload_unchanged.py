"""Review R90b: LangGraph's msgpack writes a lone surrogate in a string value as ``?``, so a
model's answer holding one in a tool call counted as storable, and the call read back from a
checkpoint (``interrupt_before=["tools"]``, then resumed) was another call than the one the model
wrote: ``{"amount": 100.00000000000000001, "memo": "\\ud800"}`` (the escape is ASCII) ran as
``100.0`` under ``amount<=100``, its memo ``?`` no longer what the text as written reads, so the
check of the text was skipped as for a middleware's edit; ``memo="x\\ud800"``, which the gate
refuses in memory, ran as ``x?``; and the id ``a\\ud800``, refused by its id in memory, ran as
``a?``. A call whose id, arguments or text as written would not come back the same is now refused
before it is decided (``agentgate_unstorable``), with a checkpoint reload or without."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from test_langgraph_exact_numbers import _AsWritten
from test_langgraph_r90_surrogate_call_id import POLICY
from test_langgraph_r90_surrogate_call_id import UNSTORABLE_SAID as ARGUMENTS_SAID
from test_langgraph_r90_written_text_kept import _deep, _dispatched

from agentgate.gate import Gate
from agentgate.integrations.langgraph import create_gated_agent
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

INEXACT = '{"amount": 100.00000000000000001, "memo": "\\ud800"}'  # ASCII, as a model writes it
CALL_SAID = "the tool call's id or tool name holds text the run's checkpointer cannot store"
RELOADS = pytest.mark.parametrize("reload", [False, True], ids=["in_memory", "reloaded"])


@pytest.fixture
def paying(tmp_path: Path) -> Iterator[Any]:
    keys = {n: SigningKey.generate() for n in ("root", "boss")}
    gate = Gate(
        parse_policy(POLICY.format(**{n: k.did for n, k in keys.items()}), source="p.yaml"),
        SQLiteStore(tmp_path / "agentgate.db"),
    )
    boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
    ran: list[tuple[float, str]] = []

    def pay(amount: float, memo: str = "") -> str:
        ran.append((amount, memo))
        return "paid"

    tool = StructuredTool.from_function(func=pay, name="pay", description="pay")

    def run(answer: AIMessage, reload: bool) -> tuple[ToolMessage, list[tuple[float, str]]]:
        model = _AsWritten(turns=[answer, AIMessage(content="done")])
        agent = create_gated_agent(gate, name="boss", model=model, tools=[tool], checkpointer=InMemorySaver())
        config: Any = {"configurable": {"thread_id": "t"}}
        go = {"messages": [{"role": "user", "content": "pay"}]}
        if reload:  # the answer is read back from the checkpoint before its calls run
            agent.invoke(go, config, context=boss, interrupt_before=["tools"])
            result = agent.invoke(None, config, context=boss)
        else:
            result = agent.invoke(go, config, context=boss)
        (told,) = [m for m in result["messages"] if isinstance(m, ToolMessage)]
        assert result["messages"][-1].content == "done"
        return told, ran

    try:
        yield run
    finally:
        gate.close()


@RELOADS
def test_an_inexact_call_as_dispatched_is_refused_after_a_reload(paying: Any, reload: bool) -> None:
    told, ran = paying(_dispatched(INEXACT), reload)
    assert ran == []  # until the fix, reloaded: [(100.0, "?")]
    assert told.status == "error"
    assert ARGUMENTS_SAID in str(told.content)


@RELOADS
def test_an_inexact_call_whose_text_is_kept_is_refused_after_a_reload(paying: Any, reload: bool) -> None:
    # The raw call is left out (a vendor field nested too deep), its text kept by agentgate.
    told, ran = paying(_dispatched(INEXACT, x_vendor=_deep(300)), reload)
    assert ran == []  # until the fix, reloaded: [(100.0, "?")]
    assert ARGUMENTS_SAID in str(told.content)


@RELOADS
def test_a_lone_surrogate_in_a_value_is_refused_after_a_reload(paying: Any, reload: bool) -> None:
    call = {"name": "pay", "args": {"amount": 5, "memo": "x\ud800"}, "id": "c1"}
    told, ran = paying(AIMessage(content="", tool_calls=[call]), reload)
    assert ran == []  # until the fix, reloaded: [(5.0, "x?")], a memo the model never wrote
    assert ARGUMENTS_SAID in str(told.content)


@RELOADS
def test_a_lone_surrogate_in_the_call_id_is_refused_after_a_reload(paying: Any, reload: bool) -> None:
    call = {"name": "pay", "args": {"amount": 5}, "id": "a\ud800"}
    told, ran = paying(AIMessage(content="", tool_calls=[call]), reload)
    assert ran == []  # until the fix, reloaded: [(5.0, "")], as the call a?
    assert told.status == "error"
    # In memory the gate refuses the id itself; read back, the id is a?, refused by its note.
    assert ("call_id must be valid Unicode text" if not reload else CALL_SAID) in str(told.content)


def test_a_call_of_plain_text_still_runs_after_a_reload(paying: Any) -> None:
    call = {"name": "pay", "args": {"amount": 5, "memo": "x"}, "id": "c1"}
    told, ran = paying(AIMessage(content="", tool_calls=[call]), True)
    assert ran == [(5.0, "x")]
    assert told.status == "success"
