"""Findings as a promise: every refusal names its failure state (kind), a specific code and a
message a person can act on, on every surface that shows it (the decision, the audit entry, the
span, the CLI, the LangGraph ToolMessage), and docs/concepts.md lists each code under its kind."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentgate.authority import Budget, GrantRepository, Invocation, decide, delegate, issue, parse_chain
from agentgate.authority._grant import _encode_chain
from agentgate.capabilities import Call
from agentgate.cli.main import main
from agentgate.errors import AuthorityError
from agentgate.findings import Finding
from agentgate.gate import AgentIdentity, Gate
from agentgate.keys import SigningKey
from agentgate.policy import PolicyIndex, explain, parse_policy
from agentgate.store import SQLiteStore

CONCEPTS = Path(__file__).resolve().parent.parent / "docs" / "concepts.md"
NOW = 1_800_000_000

POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker]}}
  lead: {{kind: human, did: "{lead}", roles: [lead]}}
tools:
  lookup:
    args: {{id: {{type: string, required: true}}}}
    idempotent: true
    loggable: [id]
  refund:
    args: {{amount: {{type: integer, required: true}}}}
    loggable: [amount]
roles:
  worker:
    kind: agent
    capabilities:
      - resource: tool:lookup
      - resource: tool:refund
        constraints: {{amount: {{le: 1000}}}}
    budget: {{limit: 10000, unit: usd_micros}}
    ttl_s: 600
    delegation:
      max_depth: 1
      max_ttl_s: 300
      budget: {{limit: 100, unit: usd_micros}}
      capabilities:
        - resource: tool:lookup
  lead:
    kind: human
    capabilities:
      - resource: tool:refund
    ttl_s: 600
approvals:
  big-refund:
    resource: tool:refund
    when: {{amount: {{gt: 100}}}}
    approvers: [lead]
"""


@dataclass
class Desk:
    gate: Gate
    keys: dict[str, SigningKey]
    agent: AgentIdentity
    spans: InMemorySpanExporter


@pytest.fixture
def desk(tmp_path: Path) -> Iterator[Desk]:
    keys = {n: SigningKey.generate() for n in ("root", "agent", "lead")}
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    policy = parse_policy(POLICY.format(**{n: k.did for n, k in keys.items()}), source="desk.yaml")
    gate = Gate(policy, SQLiteStore(tmp_path / "agentgate.db"), tracer=provider.get_tracer("test"))
    agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
    try:
        yield Desk(gate, keys, agent, spans)
    finally:
        gate.close()


def _documented_kinds() -> dict[str, str]:
    """Each code of docs/concepts.md's table of the four failure states, with the kind of its row."""
    kinds: dict[str, str] = {}
    for line in CONCEPTS.read_text().splitlines():
        row = re.fullmatch(r"\| `([a-z_]+)` \| [^|]+ \| (.+) \|", line)
        if row is not None:
            for code in re.findall(r"`([a-z_]+)`", row.group(2)):
                kinds[code] = row.group(1)
    return kinds


def _refused_delegation(desk: Desk, **asked: object) -> Finding:
    with pytest.raises(AuthorityError) as refused:
        desk.gate.delegate(desk.agent, name="helper", key=SigningKey.generate(), **asked)  # type: ignore[arg-type]
    assert isinstance(refused.value.finding, Finding)
    return refused.value.finding


# --- the documented table against what is emitted ------------------------------------------------


def test_each_code_the_gate_refuses_a_delegation_with_is_in_the_concepts_table_under_its_kind(
    desk: Desk,
) -> None:
    documented = _documented_kinds()
    one_minute = timedelta(minutes=1)
    found = [
        _refused_delegation(desk, capabilities=["tool:refund"], ttl=one_minute),
        _refused_delegation(desk, capabilities=["tool:lookup"], ttl=timedelta(minutes=9)),
        _refused_delegation(desk, capabilities=["tool:lookup"], ttl=one_minute, budget=500),
    ]
    lead = desk.gate.issue(desk.keys["root"], name="lead", key=desk.keys["lead"], role="lead")
    with pytest.raises(AuthorityError) as refused:
        desk.gate.delegate(
            lead, name="helper", key=SigningKey.generate(), capabilities=["tool:refund"], ttl=one_minute
        )
    assert isinstance(refused.value.finding, Finding)
    found.append(refused.value.finding)
    assert [f.code for f in found] == [
        "delegation_wider_than_policy",
        "delegation_ttl_above_policy",
        "delegation_budget_above_policy",
        "delegation_not_in_policy",
    ]
    for finding in found:
        assert documented.get(finding.code) == finding.kind.value, finding.code


def test_each_code_of_the_authority_engine_is_in_the_concepts_table_under_its_kind(tmp_path: Path) -> None:
    documented = _documented_kinds()
    root, alice, bob = (SigningKey(bytes([i]) * 32) for i in (41, 42, 43))
    chain = issue(root, alice.did, ["tool:pay?amount<=500"], ttl=600, budget=Budget(10, "calls"), now=NOW)
    found: list[Finding] = []
    for asked in (
        {"capabilities": ["tool:pay?amount<=900"]},
        {"capabilities": ["tool:other"]},
        {"capabilities": ["tool:pay?amount<=5"], "budget": Budget(5, "tokens")},
        {"capabilities": ["tool:pay?amount<=5"], "budget": Budget(50, "calls")},
        {"capabilities": ["tool:pay?amount<=5"], "max_depth": 5},
        {"capabilities": ["tool:pay?amount<=5"], "ttl": 6000},
    ):
        with pytest.raises(AuthorityError) as refused:
            delegate(chain, alice, bob.did, now=NOW, **{"ttl": 60, **asked})  # type: ignore[arg-type]
        assert isinstance(refused.value.finding, Finding)
        found.append(refused.value.finding)
    child = delegate(chain, alice, bob.did, ["tool:pay?amount<=5"], ttl=60, now=NOW)
    repo = GrantRepository(SQLiteStore(tmp_path / "s.db"))
    invocation = Invocation.sign(bob, child, Call.tool("pay", {"amount": 6}), now=NOW + 1)
    for presented, now in (
        (invocation, NOW + 1),
        (Invocation.sign(alice, child, Call.tool("pay", {"amount": 1}), now=NOW + 1), NOW + 1),
        (Invocation.sign(bob, child, Call.tool("pay", {"amount": 1}), now=NOW + 100), NOW + 100),
    ):
        found.extend(decide(presented, repo=repo, trusted=root.did, now=now).findings)
    codes = [f.code for f in found]
    assert codes == [
        "constraint_widened",
        "capability_widened",
        "budget_unit_changed",
        "budget_widened",
        "depth_widened",
        "outlives_parent",
        "call_not_covered",
        "wrong_holder",
        "grant_expired",
    ]
    for finding in found:
        assert documented.get(finding.code) == finding.kind.value, finding.code


# --- policy explain ----------------------------------------------------------------------------------


def test_explain_of_a_call_a_rule_allows_but_no_approval_can_does_not_say_it_was_not_allowed(
    desk: Desk,
) -> None:
    """The lead is the only approver of its own refunds above 100: the rule allows the call, and
    it is denied because no approval can be valid, not because nothing allowed it."""
    decision, text = explain(PolicyIndex(desk.gate.policy), "lead", Call.tool("refund", {"amount": 500}))
    assert decision.outcome.value == "deny"
    assert "allowed by role lead rule 1" in text and "no approval can be valid" in text
    assert "anything not explicitly allowed is denied" not in text
    _, plain = explain(PolicyIndex(desk.gate.policy), "agent", Call.tool("refund", {"amount": 5000}))
    assert plain.endswith("    - anything not explicitly allowed is denied")


# --- defects whose fix belongs to other files ----------------------------------------------------


def test_a_delegation_from_a_revoked_parent_is_recorded_as_revoked_not_as_a_malformed_token(
    desk: Desk,
) -> None:
    desk.gate.revoke(desk.agent, reason="leaked")
    finding = _refused_delegation(desk, capabilities=["tool:lookup"], ttl=timedelta(minutes=1))
    assert (finding.kind.value, finding.code) == ("non_revocable_grant", "revoked")
    desk.gate.flush()
    refused = list(desk.gate.audit.entries())[-1]
    assert refused.kind == "deny" and refused.resource == "agent:helper"
    assert "non_revocable_grant:revoked" in refused.reasons
    assert not any("malformed_token" in reason for reason in refused.reasons)


def test_a_delegation_with_no_identity_names_the_no_chain_finding(desk: Desk) -> None:
    with pytest.raises(AuthorityError) as refused:
        desk.gate.delegate(None, name="helper", key=SigningKey.generate(), capabilities=["tool:lookup"],
                           ttl=timedelta(minutes=1))  # fmt: skip
    finding = refused.value.finding
    assert isinstance(finding, Finding)
    assert (finding.kind.value, finding.code) == ("authority_chain_opacity", "no_chain")
    assert "authority_chain_opacity:no_chain" in list(desk.gate.audit.entries())[-1].reasons


def test_a_call_with_no_identity_says_why_on_its_span_and_to_the_model(desk: Desk) -> None:
    desk.spans.clear()  # the span of the agent's grant, issued by the fixture
    refused = desk.gate.authorize(None, Call.tool("lookup", {"id": "x"}))
    assert [f.code for f in refused.findings] == ["no_chain"]
    (span,) = desk.spans.get_finished_spans()
    assert span.status.description is not None and "identity" in span.status.description
    assert "identity" in refused.explain()


def test_inspect_marks_a_chain_whose_first_link_was_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "store.db"))
    monkeypatch.chdir(tmp_path)
    root, alice, bob = (SigningKey.generate() for _ in range(3))
    chain = delegate(
        issue(root, alice.did, ["tool:search"], ttl=600), alice, bob.did, ["tool:search"], ttl=60
    )
    Path("dropped.tok").write_text(_encode_chain([chain.links[1]]) + "\n")
    assert parse_chain(Path("dropped.tok").read_text().strip()).root.parent is not None
    assert main(["grant", "inspect", "dropped.tok"]) == 1  # a marked link (review R61)
    assert "root_has_parent" in capsys.readouterr().out
    assert main(["grant", "inspect", "dropped.tok", "--json"]) == 1
    shown = json.loads(capsys.readouterr().out)
    assert [f["code"] for f in shown["links"][0]["findings"]] == ["root_has_parent"]


def test_a_refused_delegation_tells_the_supervisor_the_findings_kind_and_code(tmp_path: Path) -> None:
    from test_langgraph import _ask_researcher, _calls, _make_team, _tool_messages

    from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent

    team = _make_team(tmp_path)
    try:
        ask = _ask_researcher(team, capabilities=["tool:search", "tool:shell"])
        model = ScriptedChatModel(turns=[_calls(("ask_researcher", {"task": "go"}))])
        supervisor = create_gated_agent(team.gate, name="supervisor", model=model, tools=[ask])
        result = supervisor.invoke({"messages": [{"role": "user", "content": "go"}]}, context=team.supervisor)
        (message,) = _tool_messages(result)
        assert message.status == "error" and team.ran == []
        told = str(message.content)
        assert "scope_creep" in told and "delegation_wider_than_policy" in told
    finally:
        team.gate.close()
