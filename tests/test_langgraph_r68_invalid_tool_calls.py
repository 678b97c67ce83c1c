"""A model answer's ``invalid_tool_calls`` (arguments that are no JSON object: malformed, or cut
at the output limit) are never routed to the tools: LangChain ends the run on an answer holding
only such calls, or tells the model at its next turn that they were malformed. The audit log
records each as a call the model proposed and that did not run (a ``deny`` entry naming the tool
and why), never an allow, and never the raw arguments (which no per-argument redaction can
read)."""

from __future__ import annotations

import asyncio
import hashlib
from pathlib import Path
from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from test_langgraph import NAMES, Team, _entries, _make_team, _policy_text, _tools

from agentgate.gate import AgentIdentity, Gate
from agentgate.integrations.langgraph import create_gated_agent
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

GO = {"messages": [{"role": "user", "content": "go"}]}
SECRET_ARGS = '{"query": "sk-live-123'


class _Answers(BaseChatModel):
    """Answers ``answers[n]`` at its ``n``-th turn (the AI messages already in the conversation),
    then ``Done.``: unlike ``ScriptedChatModel`` it keeps an answer's ``invalid_tool_calls``."""

    answers: list[AIMessage]

    @property
    def _llm_type(self) -> str:
        return "answers"

    def bind_tools(self, tools: Any, **kwargs: Any) -> _Answers:  # type: ignore[override]
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any
    ) -> ChatResult:
        n = sum(1 for m in messages if isinstance(m, AIMessage))
        answer = self.answers[n] if n < len(self.answers) else AIMessage(content="Done.")
        return ChatResult(generations=[ChatGeneration(message=answer)])


def _invalid(name: str | None, call_id: str, args: str = SECRET_ARGS) -> dict[str, Any]:
    return {"type": "invalid_tool_call", "name": name, "args": args, "id": call_id, "error": f"bad {args}"}


def _agent(team: Team, answers: list[AIMessage], *, gate_models: bool = True) -> Any:
    return create_gated_agent(
        team.gate,
        name="supervisor",
        model=_Answers(answers=answers),
        model_name="scripted",
        tools=_tools(team),
        gate_models=gate_models,
    )


def _tool_entries(team: Team) -> list[Any]:
    return [e for e in _entries(team.gate) if e.resource.startswith("tool:")]


def _assert_recorded_as_not_run(entry: Any, resource: str) -> None:
    assert (entry.kind, entry.resource, entry.args) == ("deny", resource, {})
    digest = hashlib.sha256(SECRET_ARGS.encode()).hexdigest()
    (reason,) = entry.reasons
    assert "not run" in reason and f"sha256:{digest}" in reason and f"{len(SECRET_ARGS)} characters" in reason
    assert "sk-live" not in reason


def test_an_answer_holding_only_an_invalid_call_records_it_as_not_run(tmp_path: Path) -> None:
    """Review R68: an answer whose only tool call has arguments that are no JSON left no trace in
    the audit log (LangChain never routes it to the tools, and the run ended)."""
    team = _make_team(tmp_path)
    try:
        answer = AIMessage(content="", invalid_tool_calls=[_invalid("search", "c1")])
        result = _agent(team, [answer]).invoke(GO, context=team.supervisor)
        assert result["messages"][-1].invalid_tool_calls  # the run ended on it
        (entry,) = _tool_entries(team)
        _assert_recorded_as_not_run(entry, "tool:search")
        assert team.ran == []
    finally:
        team.gate.close()


async def test_invalid_calls_beside_a_valid_one_are_recorded_under_ainvoke(tmp_path: Path) -> None:
    """Review R68: beside a valid call (which runs), an invalid call of a tool and one of a name
    that is no resource name were not recorded; each now is, once, under ``ainvoke`` too."""
    team = _make_team(tmp_path)
    try:
        answer = AIMessage(
            content="",
            tool_calls=[{"name": "search", "args": {"query": "a"}, "id": "ok"}],
            invalid_tool_calls=[_invalid("publish", "c1"), _invalid("no such tool!", "c2")],
        )
        await _agent(team, [answer]).ainvoke(GO, context=team.supervisor)
        denied = [e for e in _tool_entries(team) if e.kind == "deny"]
        assert [e.resource for e in denied] == ["tool:publish", "tool:no such tool!"]
        for entry, resource in zip(denied, ("tool:publish", "tool:no such tool!"), strict=True):
            _assert_recorded_as_not_run(entry, resource)
        assert team.ran == ["search:a"]
    finally:
        team.gate.close()


def test_an_invalid_call_is_recorded_with_ungated_model_calls_too(tmp_path: Path) -> None:
    """Review R68: with ``gate_models=False`` the tool half is still gated: an invalid call, which
    never reaches it, is recorded by the model hook."""
    team = _make_team(tmp_path)
    try:
        answer = AIMessage(content="", invalid_tool_calls=[_invalid(None, "c1")])
        _agent(team, [answer], gate_models=False).invoke(GO, context=team.supervisor)
        (entry,) = _tool_entries(team)
        _assert_recorded_as_not_run(entry, "tool:None")
    finally:
        team.gate.close()


def test_an_invalid_call_is_recorded_once_when_the_model_turn_is_not_run_again(tmp_path: Path) -> None:
    """Review R68: recorded once per answer, the model's next turn (told the call was malformed)
    records nothing more."""
    team = _make_team(tmp_path)
    try:
        answer = AIMessage(
            content="",
            tool_calls=[{"name": "search", "args": {"query": "a"}, "id": "ok"}],
            invalid_tool_calls=[_invalid("search", "c1")],
        )
        asyncio.run(_agent(team, [answer]).ainvoke(GO, context=team.supervisor))
        assert [e.resource for e in _tool_entries(team) if e.kind == "deny"] == ["tool:search"]
    finally:
        team.gate.close()


def deploy_gate(tmp_path: Path) -> tuple[Gate, AgentIdentity, StructuredTool]:
    """The test team's policy with ``deploy``, a tool that takes no arguments and waits for
    dana's approval; its gate, the supervisor's identity and the tool."""
    keys = {name: SigningKey.generate() for name in NAMES}
    text = _policy_text({n: k.did for n, k in keys.items()}, 1_000_000)
    text = text.replace("  shell:\n", "  deploy: {}\n  shell:\n", 1)
    text = text.replace("      - resource: tool:ask_stowaway\n", "      - resource: tool:deploy\n", 1)
    text += "  deploy:\n    resource: tool:deploy\n    approvers: [dana]\n    expiry_s: 600\n"
    gate = Gate(parse_policy(text, source="team.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    supervisor = gate.issue(keys["root"], name="supervisor", key=keys["supervisor"], role="supervisor")
    deploy = StructuredTool.from_function(func=lambda: "deployed", name="deploy", description="deploy")
    return gate, supervisor, deploy


def answering(gate: Gate, answer: AIMessage, tools: list[StructuredTool]) -> Any:
    """The supervisor's agent whose model answers ``answer``, then ``Done.``."""
    return create_gated_agent(
        gate,
        name="supervisor",
        model=_Answers(answers=[answer]),
        model_name="scripted",
        tools=tools,
        checkpointer=InMemorySaver(),
    )


def pending(gate: Gate) -> int:
    return len(gate.store.query("SELECT id FROM approvals WHERE state = 'pending'"))


def test_an_invalid_call_closes_no_approval_request_of_another_run(tmp_path: Path) -> None:
    """Review R68: recorded with the call's id, the refusal of an invalid call of a tool that
    takes no arguments closed the approval request another thread of the same agent had open for
    its own call of that tool under the same id (a model that numbers its calls alike)."""
    gate, supervisor, deploy = deploy_gate(tmp_path)
    asking = AIMessage(content="", tool_calls=[{"name": "deploy", "args": {}, "id": "call_0"}])
    malformed = AIMessage(content="", invalid_tool_calls=[_invalid("deploy", "call_0")])
    try:
        paused = answering(gate, asking, [deploy]).invoke(
            GO, {"configurable": {"thread_id": "a"}}, context=supervisor
        )
        assert paused["__interrupt__"]
        answering(gate, malformed, [deploy]).invoke(
            GO, {"configurable": {"thread_id": "b"}}, context=supervisor
        )
        assert pending(gate) == 1
    finally:
        gate.close()
