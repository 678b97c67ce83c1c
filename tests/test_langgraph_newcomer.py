"""The LangGraph integration, the examples and the quickstart, as a new user would
meet them: each test is a defect found by running real agents or by following the docs literally."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

from langchain.tools import ToolRuntime
from langchain_core.messages import ToolMessage
from langchain_core.tools import StructuredTool
from langgraph.types import Command
from test_langgraph import (
    NAMES,
    Team,
    _ask_researcher,
    _calls,
    _entries,
    _policy_text,
    _tool_messages,
    _tools,
)
from test_langgraph import team as team  # the fixture

from agentgate.gate import Gate
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

ROOT = Path(__file__).resolve().parents[1]
GO = {"messages": [{"role": "user", "content": "go"}]}
# What json.loads makes of "\ud83d" in a tool call's arguments: half of an emoji, which a model
# whose output was cut short, or a hostile one, sends through any OpenAI-compatible endpoint.
HALF_EMOJI = "reports/\ud83d"


def _surrogate_agent(team: Team) -> Any:
    """An agent whose model asks to publish (approval gate) with a lone surrogate in the path,
    then searches."""
    model = ScriptedChatModel(
        turns=[_calls(("publish", {"path": HALF_EMOJI})), _calls(("search", {"query": "next"}))]
    )
    return create_gated_agent(
        team.gate, name="supervisor", model=model, tools=_tools(team), gate_models=False
    )


def test_an_argument_that_is_not_valid_unicode_is_a_tool_error_not_the_end_of_the_run(team: Team) -> None:
    # Gate.authorize raised InputError (the approval request's argument digest) out of the
    # middleware: the whole run ended with a traceback on one bad tool call of the model.
    result = _surrogate_agent(team).invoke(GO, context=team.supervisor)
    refused, searched = _tool_messages(result)
    assert refused.status == "error" and "not valid Unicode" in str(refused.content)
    assert searched.status == "success"  # the run went on to the model's next turn
    assert team.ran == ["search:next"]


async def test_the_same_holds_under_ainvoke(team: Team) -> None:
    result = await _surrogate_agent(team).ainvoke(GO, context=team.supervisor)
    refused, searched = _tool_messages(result)
    assert refused.status == "error" and searched.status == "success"
    assert team.ran == ["search:next"]


def test_a_tool_that_reports_an_error_in_the_command_it_returns_is_audited_as_an_error(team: Team) -> None:
    # A tool may answer with a Command whose update carries its ToolMessage (LangGraph's way to
    # update state from a tool). Its error status was not read: the audit log said "ok".
    def search(query: str, runtime: ToolRuntime[Any, Any]) -> Command[Any]:
        message = ToolMessage(
            content="backend down", tool_call_id=runtime.tool_call_id or "", name="search", status="error"
        )
        return Command(update={"messages": [message]})

    tool = StructuredTool.from_function(func=search, name="search", description="search")
    model = ScriptedChatModel(turns=[_calls(("search", {"query": "x"}))])
    agent = create_gated_agent(team.gate, name="supervisor", model=model, tools=[tool], gate_models=False)
    result = agent.invoke(GO, context=team.supervisor)
    assert [m.status for m in _tool_messages(result)] == ["error"]
    outcomes = [(e.resource, e.status) for e in _entries(team.gate) if e.kind == "outcome"]
    assert outcomes == [("tool:search", "error")]


def _blocks(markdown: str, language: str) -> list[str]:
    """The fenced ``language`` blocks of ``markdown`` in order, also those indented in a list."""
    found = re.findall(rf"^( *)```{language}\n(.*?)^\1```", markdown, flags=re.S | re.M)
    return [textwrap.dedent(block) for _, block in found]


def test_the_quickstart_runs_as_written_in_a_fresh_directory(tmp_path: Path) -> None:
    # Followed literally, the quickstart's code failed: `my_chat_model` was never defined, the
    # create_agent snippet imported neither create_agent nor a model and replaced the paused agent
    # before the resume; its only install line names a package that is not on PyPI; and with no
    # gate.close() the last outcome could be lost at exit (tests/test_gate_outcomes.py).
    doc = (ROOT / "docs" / "quickstart.md").read_text()
    install = _blocks(doc, "bash")[0]
    assert "pip install" in install and "[langgraph]" in install and "checkout" in install
    cli = Path(sys.executable).with_name("agentgate")
    shutil.copy(ROOT / "policies" / "support.yaml", tmp_path / "support.yaml")
    for line in _blocks(doc, "bash")[1].splitlines():
        command = line.split("#")[0].split()
        if command and command[0] == "agentgate":
            subprocess.run([str(cli), *command[1:]], cwd=tmp_path, check=True, capture_output=True)
    code = "\n".join(_blocks(doc, "python"))
    code += "\nassert 'refunded 800' in str(state['messages'][-2].content), state\n"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("AGENTGATE_STORE", None)
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env
    )
    assert run.returncode == 0, run.stderr[-3000:]
    verify = subprocess.run([str(cli), "audit", "verify"], cwd=tmp_path, capture_output=True, text=True)
    assert verify.returncode == 0 and verify.stdout.startswith("intact"), verify.stdout + verify.stderr
    # Every decision and every outcome: the grant, the refusal of 2500, the request for 800, its
    # approval, its allow and its outcome (the gate closed, so the last outcome was committed).
    assert "intact: 6 entries" in verify.stdout, verify.stdout


def _revoked_mid_run(team: Team, gate_models: bool) -> tuple[dict[str, Any], int]:
    """A run whose grant is revoked by its second tool call, under a model that would ask for ten
    tools, one a turn; the run's result and how many times the model was asked."""

    def search(query: str) -> str:
        if query == "q1":
            team.gate.revoke(team.supervisor, reason="the operator stops the agent")
        team.ran.append(query)
        return "found"

    asked: list[int] = []

    class Counting(ScriptedChatModel):
        def _generate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
            asked.append(len(messages))
            return super()._generate(messages, stop, run_manager, **kw)

    model = Counting(turns=[_calls(("search", {"query": f"q{i}"})) for i in range(10)])
    tool = StructuredTool.from_function(func=search, name="search", description="search")
    agent = create_gated_agent(
        team.gate, name="supervisor", model=model, tools=[tool], gate_models=gate_models
    )
    return agent.invoke(GO, context=team.supervisor), len(asked)


def test_a_grant_revoked_mid_run_ends_the_run_also_when_model_calls_are_not_gated(team: Team) -> None:
    # With gate_models=False (the quickstart's and support example's setting) the operator's
    # revocation refused every later tool call, but the model was asked again and again (ten
    # turns here, each a paid model call the gate does not see) until it gave up by itself.
    result, asked = _revoked_mid_run(team, gate_models=False)
    assert team.ran == ["q0", "q1"]
    last = result["messages"][-1]
    assert last.type == "ai" and not last.tool_calls and "revoked" in str(last.content)
    assert asked == 3  # q0, q1, then the refused q2: no fourth turn


def test_a_grant_revoked_mid_run_with_model_calls_gated_ends_it_at_the_next_model_call(team: Team) -> None:
    result, asked = _revoked_mid_run(team, gate_models=True)
    assert team.ran == ["q0", "q1"] and asked == 2  # the model call after q1 is refused
    assert "revoked" in str(result["messages"][-1].content)


def test_a_supervisor_that_only_delegates_stops_once_its_grant_is_revoked(team: Team) -> None:
    # The delegation tool's refusal (Gate.delegate raises Revoked) was a plain tool error: a
    # supervisor with gate_models=False was asked again every turn, for delegations that can
    # only be refused.
    def search(query: str) -> str:
        team.gate.revoke(team.supervisor, reason="the operator stops the team")
        team.ran.append(query)
        return "found"

    researcher = create_gated_agent(
        team.gate,
        name="researcher",
        model=ScriptedChatModel(turns=[_calls(("search", {"query": "papers"}))]),
        tools=[StructuredTool.from_function(func=search, name="search", description="search")],
        gate_models=False,
    )
    asks = [_calls(("ask_researcher", {"task": f"t{i}"})) for i in range(10)]
    supervisor = create_gated_agent(
        team.gate,
        name="supervisor",
        model=ScriptedChatModel(turns=asks),
        tools=[_ask_researcher(team, agent=researcher)],
        gate_models=False,
    )
    result = supervisor.invoke(GO, context=team.supervisor)
    assert team.ran == ["papers"]
    turns = [m for m in result["messages"] if m.type == "ai"]
    assert len(turns) == 3  # t0 (ran, revoked meanwhile), t1 (refused), then the end
    assert not turns[-1].tool_calls and "revoked" in str(turns[-1].content)


class _NamedByModel(ScriptedChatModel):
    """A chat model that keeps its name in ``model``, as ChatOllama, ChatAnthropic and
    ChatGoogleGenerativeAI do (only some, like ChatOpenAI, also have ``model_name``)."""

    model: str
    model_name: str = ""

    @property
    def _llm_type(self) -> str:
        return "chat-named-by-model"


def test_a_chat_model_is_decided_under_the_name_it_was_given(team: Team) -> None:
    # Only ``model_name`` was read: a model that names itself in ``model`` was decided as its
    # LangChain type (``model:chat-ollama``, ``model:anthropic-chat``), so a policy naming the
    # model refused every call, and one granting the type granted every model of that provider.
    model = _NamedByModel(model="scripted", turns=[_calls(("search", {"query": "x"}))])
    agent = create_gated_agent(team.gate, name="supervisor", model=model, tools=_tools(team))
    result = agent.invoke(GO, context=team.supervisor)
    assert team.ran == ["search:x"], result["messages"][-1].content
    decided = {e.resource for e in _entries(team.gate) if e.kind == "allow"}
    assert "model:scripted" in decided


async def test_a_sync_tool_past_its_timeout_under_ainvoke_keeps_its_concurrency_slot(tmp_path: Path) -> None:
    # Under ainvoke LangGraph runs a sync tool in a worker thread. The attempt's timeout cancelled
    # the awaiting coroutine and gave the slot back while the thread still ran, so the next call
    # started: three calls of a tool limited to one ran at once (e.g. three refunds at a payment
    # API the policy allows one at a time). The slot is now held until the thread ends.
    running, peak = [0], [0]
    lock = threading.Lock()

    def search(query: str) -> str:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.6)
        with lock:
            running[0] -= 1
        return "found"

    keys = {name: SigningKey.generate() for name in NAMES}
    text = _policy_text({n: k.did for n, k in keys.items()}, 1_000_000)
    limited = text.replace("concurrency: 2", "concurrency: 1\n    timeout_s: 0.2")
    gate = Gate(parse_policy(limited, source="team.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    try:
        identity = gate.issue(keys["root"], name="supervisor", key=keys["supervisor"], role="supervisor")
        tool = StructuredTool.from_function(func=search, name="search", description="search")
        model = ScriptedChatModel(turns=[_calls(*[("search", {"query": f"q{i}"}) for i in range(3)])])
        agent = create_gated_agent(gate, name="supervisor", model=model, tools=[tool], gate_models=False)
        result = await agent.ainvoke(GO, context=identity)
        assert len(_tool_messages(result)) == 3
        assert peak[0] == 1
    finally:
        gate.close()
