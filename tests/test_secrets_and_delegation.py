"""What telemetry and errors may carry, and who may delegate (found by review R4).

Spans export only what the audit log would keep; a nested agent on an inherited identity and a
revoked parent hand nothing on. Real components: an opentelemetry-sdk in-memory exporter, SQLite.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_gate import Setup

from agentgate.capabilities import Call


def _traced(tmp_path: Path) -> tuple[Setup, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return Setup(tmp_path, tracer=provider.get_tracer("r4")), exporter


def _span_text(exporter: InMemorySpanExporter) -> str:
    return " ".join(
        f"{s.name} {dict(s.attributes or {})} {s.status.description} "
        + " ".join(str(dict(e.attributes or {})) for e in s.events)
        for s in exporter.get_finished_spans()
    )


def test_a_refusal_span_does_not_carry_a_non_loggable_argument(tmp_path: Path) -> None:
    """A value of an argument the policy does not mark loggable is never exported, not even inside
    a reason on a refusal's span (the span's status held the unredacted reasons)."""
    made, exporter = _traced(tmp_path)
    try:
        made.gate.authorize(made.agent, Call.tool("vault", {"pin": "99-hunter2"}))
    finally:
        made.gate.close()
    assert "execute_tool vault" in _span_text(exporter)
    assert "hunter2" not in _span_text(exporter)


def test_a_failing_tool_does_not_export_its_exception_text(tmp_path: Path) -> None:
    """A tool that raises is named only by its exception type: its message (and a recorded
    exception event with the traceback) may carry secrets."""
    made, exporter = _traced(tmp_path)

    def tool() -> str:
        raise RuntimeError("login failed for password hunter2")

    try:
        auth = made.gate.authorize(made.agent, Call.tool("lookup", {"id": "7"}))
        with pytest.raises(RuntimeError):
            made.gate.run(auth, tool, call_id="t1")
    finally:
        made.gate.close()
    assert "execute_tool lookup" in _span_text(exporter)
    assert "hunter2" not in _span_text(exporter)


# --- LangGraph flows ------------------------------------------------------------------------------


def test_a_nested_agent_on_an_inherited_identity_cannot_delegate(tmp_path: Path) -> None:
    """A nested agent running on its parent's identity is refused every call, delegations too:
    a delegation tool call skipped the check, so a stowaway agent handed on the supervisor's
    rights and its sub-agent ran a search on the supervisor's authority."""

    from test_langgraph import _ask_researcher, _calls, _make_team, _tools

    from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent

    team = _make_team(tmp_path)
    try:
        helper = create_gated_agent(
            team.gate,
            name="researcher",
            model=ScriptedChatModel(turns=[_calls(("search", {"query": "stolen"}))]),
            tools=_tools(team),
        )
        ask = _ask_researcher(team, agent=helper)
        # An agent that is not the supervisor, run on the supervisor's context (the inherited
        # identity); tools only gated (gate_models=False), as documented for tool-only policies.
        stowaway = create_gated_agent(
            team.gate,
            name="stowaway",
            model=ScriptedChatModel(turns=[_calls(("ask_researcher", {"task": "go"}))]),
            tools=[ask],
            gate_models=False,
        )
        stowaway.invoke({"messages": [{"role": "user", "content": "x"}]}, context=team.supervisor)
        assert team.ran == [], "the stowaway handed on the supervisor's rights"
        assert team.gate.delegations == []
        refused = [e for e in team.gate.audit.entries() if e.kind == "deny"]
        assert any("implicit_trust_inheritance:inherited_identity" in r for e in refused for r in e.reasons)
    finally:
        team.gate.close()


def test_a_revoked_parent_cannot_delegate(tmp_path: Path) -> None:
    """A revoked parent hands nothing on (``Gate.delegate`` checked the policy rule and
    attenuation, not revocation, and a revoked supervisor got a fresh child grant)."""
    from datetime import timedelta

    from test_langgraph import _make_team

    from agentgate.errors import AgentGateError

    team = _make_team(tmp_path)
    try:
        team.gate.revoke(team.supervisor, reason="leaked")
        with pytest.raises(AgentGateError):
            team.gate.delegate(
                team.supervisor,
                name="researcher",
                key=team.keys["researcher"],
                capabilities=["tool:search"],
                ttl=timedelta(minutes=5),
            )
    finally:
        team.gate.close()


def test_a_store_error_does_not_repeat_a_password_given_as_a_url_parameter() -> None:
    """A store error never repeats a password, in the user part or as ``?password=``."""
    from agentgate.errors import StoreError
    from agentgate.store import open_store

    with pytest.raises(StoreError) as caught:
        open_store("postgresql://alice@127.0.0.1/db?password=hunter2&bogus=1")
    assert "hunter2" not in str(caught.value)
