"""Defects the third review pass (F1, F2, R7) found in the Gate, fixed by the lead: a model call
cancelled while it ran was not charged, a scheduler config with a retry class no classifier
returns was accepted until the first call, and a refusal of deeply nested unlogged arguments
raised RecursionError instead of being recorded. Each test failed on the code before its fix."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest
from test_gate import Setup
from test_gateway_backpressure import allowed_model_call
from test_tasks_shared_limits import lookup_policy

from agentgate.capabilities import Call
from agentgate.errors import InputError
from agentgate.gate import Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore
from agentgate.tasks import RetryPolicy, SchedulerConfig, ToolLimits


def test_a_model_call_cancelled_while_running_is_charged_as_reserved_not_released(tmp_path: Path) -> None:
    with allowed_model_call(tmp_path) as (gate, agent, decision):

        async def generating() -> dict[str, int]:
            await asyncio.sleep(10)  # the backend is producing tokens, a caller's timeout cuts it
            return {}

        async def scenario() -> None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(gate.arun(decision.auth, generating), 0.2)

        asyncio.run(scenario())
        gate.flush()
        # The backend ran for 0.2 s: it may have produced up to max_tokens. Released, it is 0.
        assert gate.budget_usage(agent)[agent.chain.root.id][0] == 110


def test_a_gate_refuses_a_retry_class_its_classifier_never_returns_when_it_is_made(tmp_path: Path) -> None:
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    config = SchedulerConfig(tools={"lookup": ToolLimits(retry=RetryPolicy(retry_on=("bogus",)))})
    store = SQLiteStore(tmp_path / "g.db")
    try:
        with pytest.raises(InputError, match=r"tools\['lookup'\]\.retry\.retry_on: 'bogus'"):
            Gate(parse_policy(lookup_policy(keys)), store, scheduler=config).close()
    finally:
        store.close()


def _nest(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


def test_a_refusal_of_deeply_nested_unlogged_arguments_is_recorded_not_a_recursion_error(
    tmp_path: Path,
) -> None:
    """Gate._redact_reasons takes repr() of every argument the policy does not mark loggable:
    nested 2000 deep it raised RecursionError out of authorize, and the deny entry was never
    written (the audit log itself refuses such arguments with an InputError since R7)."""
    setup = Setup(tmp_path)
    before = setup.gate.audit.size()
    auth = setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": "1", "secret": _nest(2000)}))
    assert not auth.allowed
    assert setup.gate.audit.size() == before + 1
    assert setup.entries()[-1].kind == "deny"


async def test_gate_arun_of_a_plain_function_records_that_it_ran(tmp_path: Path) -> None:
    """Gate.arun(auth, sync_fn): the wrapper ``await fn()`` ran the body, then ``await``ed its
    plain result: TypeError, and the audit said ``error`` while the tool's effect happened (F2)."""
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    gate = Gate(parse_policy(lookup_policy(keys)), SQLiteStore(tmp_path / "g.db"))
    ran: list[int] = []

    def lookup() -> str:
        ran.append(1)
        return "x"

    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        auth = gate.authorize(agent, Call.tool("lookup", {"id": "1"}))
        assert await gate.arun(auth, lookup) == "x"  # type: ignore[arg-type]
        gate.flush()
        statuses = [e.status for e in gate.audit.entries() if e.kind == "outcome"]
        assert ran == [1] and statuses == ["ok"]
    finally:
        gate.close()
