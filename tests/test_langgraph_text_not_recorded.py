"""What a LangGraph run through agentgate/integrations/langgraph/ never records: the user's
prompt, a delegation's task text (the supervisor model's words to its sub-agent), the sub-agent's
answer and the final answer reach no byte of the store, no span and no log record.

Real components: a ``Gate`` on a SQLite file (every byte of the database and its WAL is searched),
the opentelemetry-sdk in-memory exporter (``Sweep`` of test_observability), ``caplog`` at DEBUG on
every logger, real LangGraph agents driven by ``ScriptedChatModel``.
"""

from __future__ import annotations

import logging
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage
from test_observability import Sweep, _calls, _span_bytes
from test_observability import sweep as sweep  # the fixture

from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent, delegation_tool


def _store_bytes(directory: Path) -> bytes:
    """Every byte of the SQLite store: the database, its WAL and any journal."""
    return b"".join(p.read_bytes() for p in sorted(directory.glob("agentgate.db*")))


@pytest.mark.parametrize("mode", ["invoke", "ainvoke"])
def test_prompt_delegated_task_and_generated_text_reach_no_store_byte_span_or_log(
    sweep: Sweep, tmp_path: Path, caplog: pytest.LogCaptureFixture, mode: str
) -> None:
    """docs/gateway.md and docs/audit-format.md: a model call's record holds its settings, never
    its prompt or answer. The delegation tool's ``task`` (the supervisor model's prompt to its
    sub-agent) and the sub-agent's answer are text of the same kind: none of them is in the
    audit log, any other table, a span or a log record (DEBUG, every logger)."""
    import asyncio

    gate = sweep.gate
    tools = sweep.tools()
    helper = create_gated_agent(
        gate,
        name="helper",
        model=ScriptedChatModel(turns=[AIMessage(content="HELPER-ANSWER-CANARY account 991")]),
        tools=tools[:1],
    )
    ask = delegation_tool(
        gate,
        name="helper",
        agent=helper,
        key=sweep.keys["helper"],
        capabilities=["tool:lookup", "model:scripted"],
        ttl=timedelta(minutes=5),
    )
    boss = create_gated_agent(
        gate,
        name="boss",
        model=ScriptedChatModel(
            turns=[
                _calls(("ask_helper", {"task": "TASK-CANARY find the account of ssn 123-45-6789"})),
                AIMessage(content="FINAL-CANARY the account is 991"),
            ]
        ),
        tools=[*tools, ask],
    )
    prompt: Any = {"messages": [{"role": "user", "content": "PROMPT-CANARY my ssn is 123-45-6789"}]}
    with caplog.at_level(logging.DEBUG):
        if mode == "invoke":
            done = boss.invoke(prompt, context=sweep.boss)
        else:
            done = asyncio.run(boss.ainvoke(prompt, context=sweep.boss))
        gate.flush()
    assert "FINAL-CANARY" in str(done["messages"][-1].content)  # the run went through
    assert any(e.resource == "agent:helper" for e in gate.audit.entries())  # the delegation was decided
    stored, spans = _store_bytes(tmp_path), _span_bytes(sweep.exporter)
    for canary in ("PROMPT-CANARY", "TASK-CANARY", "HELPER-ANSWER-CANARY", "FINAL-CANARY", "123-45-6789"):
        assert canary.encode() not in stored, f"{canary} is in the store"
        assert canary not in spans, f"{canary} is in a span"
        assert canary not in caplog.text, f"{canary} is in a log record"
    assert re.search(r"execute_tool ask_helper", spans)
