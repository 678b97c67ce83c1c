"""Review R84: the text of an agentgate error a tool raised (an ``InputError`` of its own code)
reaches neither the model nor the dead letter, also where the scheduler refuses the call's retry
(its breaker opened meanwhile). A call a ``Gate`` runs keeps no error text
(``ToolCall.keep_error_text=False``), yet the scheduler kept the text of any agentgate error,
wrote it into the dead letter and into its refusal (``...; attempt 1 failed with InputError:
<text>``), and the LangGraph middleware, reading that refusal as the gate's own error, told it
to the model (docs/langgraph.md: a tool's own agentgate error is told by its type only, R60).
Real schedulers, a real Gate over SQLite, a real ``create_agent`` graph."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import StructuredTool
from test_langgraph_hostile_model import NAMES, _policy

from agentgate.capabilities import Call
from agentgate.errors import CircuitOpen, DeadlineExceeded, InputError
from agentgate.gate import AgentIdentity, Gate
from agentgate.gate._config import scheduler_config
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore
from agentgate.store.dead_letters import DeadLetterStore
from agentgate.tasks import (
    Attempt,
    BreakerPolicy,
    RetryPolicy,
    Scheduler,
    SchedulerConfig,
    ToolCall,
    ToolLimits,
)

SECRET = "sk-live-7c1f00ddeadbeef42"
GO = {"messages": [{"role": "user", "content": "go"}]}
RETRIED = "    retry: {attempts: 2, backoff_initial_s: 0.2, backoff_max_s: 0.2, retry_on: [error, timeout]}\n"


def _gate(
    tmp_path: Path, tool_lines: str, breaker: BreakerPolicy | None = None
) -> tuple[Gate, AgentIdentity]:
    keys = {name: SigningKey.generate() for name in NAMES}
    text = _policy({n: k.did for n, k in keys.items()}, 1_000_000, "usd_micros").replace(
        "    idempotent: true\n    loggable: [query]\n",
        "    idempotent: true\n    loggable: [query]\n" + tool_lines,
        1,
    )
    policy = parse_policy(text, source="p.yaml")
    config = None if breaker is None else dataclasses.replace(scheduler_config(policy), breaker=breaker)
    gate = Gate(policy, SQLiteStore(tmp_path / "agentgate.db"), scheduler=config)
    return gate, gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")


def _letters_text(gate: Gate) -> str:
    gate.flush()
    return repr(DeadLetterStore(gate.store).recent())


def test_the_model_is_not_told_a_tools_own_error_text_when_its_retry_is_refused(tmp_path: Path) -> None:
    # The breaker opens at the call's first failure, so its retry is refused whatever the load
    # (until R94's CI the breaker was opened by five timeouts of other calls, which had to come
    # within the retry's 0.2 s backoff: on a loaded machine they came later, and the retry ran).
    opening = BreakerPolicy(failure_threshold=1, reset_timeout_s=30.0, trip_on=("error",))
    gate, boss = _gate(tmp_path, RETRIED, breaker=opening)

    async def asearch(query: str) -> str:
        raise InputError(f"upstream rejected key {SECRET}")  # the tool's own agentgate error

    try:
        tools = [StructuredTool.from_function(coroutine=asearch, name="search", description="search")]
        calls = [{"name": "search", "args": {"query": "secret"}, "id": "c0"}]
        model = ScriptedChatModel(turns=[AIMessage(content="", tool_calls=calls)])
        agent = create_gated_agent(gate, name="boss", model=model, tools=tools)
        result = asyncio.run(agent.ainvoke(GO, context=boss))
        told = {m.tool_call_id: str(m.content) for m in result["messages"] if isinstance(m, ToolMessage)}
        assert "attempt 1 failed with InputError)" in told["c0"]  # the scheduler's refusal, by type
        assert SECRET not in told["c0"]  # until R84: "InputError: ... sk-live-..."
        letters = _letters_text(gate)
        assert "InputError" in letters and SECRET not in letters
    finally:
        gate.close()


def test_a_gate_run_refused_retry_and_its_dead_letter_name_the_tools_error_by_type(tmp_path: Path) -> None:
    # The breaker opens at the call's first failure (an error of the tool's own): its retry is
    # refused, and ``Gate.run`` raises the scheduler's refusal.
    opening = BreakerPolicy(failure_threshold=1, reset_timeout_s=30.0, trip_on=("error",))
    gate, boss = _gate(tmp_path, RETRIED, breaker=opening)
    try:
        auth = gate.authorize(boss, Call.tool("search", {"query": "secret"}), call_id="s")

        def leaky() -> str:
            raise InputError(f"upstream rejected key {SECRET}")

        with pytest.raises(CircuitOpen) as caught:
            gate.run(auth, leaky, call_id="s")
        assert str(caught.value).endswith("attempt 1 failed with InputError")  # until R84: its text
        assert isinstance(caught.value.__cause__, InputError)  # in process, the tool's error whole
        letters = _letters_text(gate)
        assert "InputError" in letters and SECRET not in letters
    finally:
        gate.close()


def _opening() -> SchedulerConfig:
    retry = RetryPolicy(attempts=3, backoff_initial_s=0.0, retry_on=("error",))
    return SchedulerConfig(
        tools={"t": ToolLimits(idempotent=True, retry=retry)},
        breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=10.0, trip_on=("error",)),
    )


@pytest.mark.parametrize("keep", [False, True])
async def test_a_scheduler_keeps_an_agentgate_errors_text_only_where_the_call_keeps_error_text(
    keep: bool,
) -> None:
    scheduler = Scheduler(_opening())

    async def tool(attempt: Attempt) -> None:
        raise InputError(f"upstream rejected key {SECRET}")

    with pytest.raises(CircuitOpen) as caught:
        await scheduler.submit(ToolCall("t", keep_error_text=keep), tool)
    (letter,) = scheduler.dead_letters()
    assert letter.errors[-1].error_type == "InputError"
    assert (SECRET in str(caught.value)) is keep  # until R84: always kept
    assert (SECRET in letter.errors[-1].message) is keep
    await scheduler.aclose()


def test_the_model_is_not_told_what_a_cut_tool_raised_of_its_own(tmp_path: Path) -> None:
    # An attempt cut at the tool's timeout: the scheduler's DeadlineExceeded names what the tool
    # raised on the way out; the model is told the deadline and the error's type, never its text.
    gate, boss = _gate(tmp_path, "    timeout_s: 0.05\n")
    try:

        async def asearch(query: str) -> str:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                raise InputError(f"cleanup failed for {SECRET}") from None
            return "never"

        tools = [StructuredTool.from_function(coroutine=asearch, name="search", description="search")]
        turns = [AIMessage(content="", tool_calls=[{"name": "search", "args": {"query": "q"}, "id": "c0"}])]
        agent = create_gated_agent(gate, name="boss", model=ScriptedChatModel(turns=turns), tools=tools)
        result = asyncio.run(agent.ainvoke(GO, context=boss))
        (told,) = [str(m.content) for m in result["messages"] if isinstance(m, ToolMessage)]
        assert "did not finish before its deadline" in told and "InputError" in told
        assert SECRET not in told
        letters = _letters_text(gate)
        assert "DeadlineExceeded" in letters and SECRET not in letters
    finally:
        gate.close()


@pytest.mark.parametrize("keep", [False, True])
async def test_the_deadline_of_a_cut_attempt_names_an_agentgate_error_by_type_unless_text_is_kept(
    keep: bool,
) -> None:
    # The scheduler's DeadlineExceeded for an attempt cut at its timeout names what the tool raised
    # as it was cut: until R84 with the text of an agentgate error even where the call keeps none
    # (a direct Gate.arun caller saw it).
    scheduler = Scheduler(SchedulerConfig(tools={"t": ToolLimits(timeout_s=0.05)}))

    async def tool(attempt: Attempt) -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            raise InputError(f"cleanup failed for {SECRET}") from None

    with pytest.raises(DeadlineExceeded) as caught:
        await scheduler.submit(ToolCall("t", keep_error_text=keep), tool)
    assert "InputError" in str(caught.value)
    assert (SECRET in str(caught.value)) is keep
    await scheduler.aclose()
