"""Every way a call is refused, paused, run or ended leaves the
audit entries docs/audit-format.md says it does (kind, principal, chain_hash, resource, ref,
reasons naming why, policy_hash), and the log verifies after each.

Real components only: ``create_agent`` graphs with a scripted model over a real SQLite store,
the Gate's own schedulers, the gateway over loopback HTTP with simulated vLLM backends, and the
GPU broker behind ``GatedBroker``.

What did not hold (found by this review):
- LangGraph: a tool call refused by the middleware before the Gate decides it left no audit
  entry at all: a call without an id (``_NO_CALL_ID``) and a call of a registered tool whose name
  is no resource name (``Search``, ``GetWeather``). The model was told "agentgate refused the
  call", yet the log, which docs/audit-format.md says records every decision ("a call or a
  delegation refused | deny"), had nothing. Fixed in agentgate/integrations/langgraph/: each is
  recorded as a ``deny`` by the run's identity (``unknown`` without one) on ``tool:NAME`` as
  asked (a name too long for a resource is cut, its length and SHA-256 in a reason), its reason
  the one the model is told, which is unchanged; with ``enforce`` too, before ``Denied``
  (``test_a_tool_call_without_an_id_is_refused_and_recorded``,
  ``test_a_tool_whose_name_is_no_resource_name_is_refused_and_recorded``,
  ``test_a_registered_tool_with_a_name_too_long_for_a_resource_is_recorded_cut``,
  ``test_with_enforce_an_undecidable_call_is_recorded_before_denied``).
  (Arguments that cannot be digested, a lone surrogate, were already decided and recorded by
  ``Gate.authorize`` itself: ``test_arguments_that_cannot_be_digested_are_a_recorded_deny``.)
  (tests/test_langgraph_hostile_model.py now expects those ``deny`` entries.) The middleware
  records through ``Gate.record_refusal``, a public method the lead added for this.
- LangGraph: a ``delegation_tool`` whose sub-agent name is not lower case (``name="Helper"``:
  the tool ``ask_Helper``) crashed the supervisor's run with a ``CapabilityError`` traceback at
  its first delegation (the inherited-identity check built ``Call.tool("ask_Helper")``), though
  the delegation itself is decided as ``agent:Helper`` and is valid. Fixed in langgraph.py
  (``test_a_delegation_tool_for_a_sub_agent_with_a_capitalised_name_delegates_and_is_audited``).
- GatedBroker (agentgate/dispatch/broker/_gated.py, fixed by the lead): a renewal refused because
  the lease would outlive the grant (``_outlived``) raises ``Denied`` with no audit entry,
  though docs/broker.md says "a renewal is decided again and audited like the request"
  (``test_a_renewal_refused_for_outliving_its_grant_is_audited``). And a renewal of a
  lease behind an approval gate leaves an ``approval_required`` entry and a pending approval
  request that nobody is meant to answer (the renewal ran without an allow), so the log says an
  approval was asked for a call that in fact ran, and approvers see a request that is moot
  (``test_a_renewal_behind_an_approval_gate_records_no_pending_approval``). Now the refusal is a
  ``deny`` (``Gate.record_refusal``), and a renewal is decided with
  ``Gate.authorize(..., approval_gates=False)``: an ``allow`` that reserves its extension.
- Gateway (agentgate/dispatch/gateway/_authority.py, fixed by the lead: ``CallerIdentity.signer``): a request signed by a key
  that is not the chain's holder (a copied chain, 401 ``wrong_holder``) is recorded as a ``deny``
  whose ``principal`` is the chain's holder, the victim whose chain was copied, not the key that
  signed it (``test_a_stolen_chain_is_not_recorded_as_its_holders_call``).

What holds (each checked on the entries themselves, then ``Gate.verify()``):
- LangGraph tool calls: an allow and its ``ok`` outcome (``ref`` = the allow); a tool that raises:
  an ``error`` outcome naming only the exception type; a policy refusal: a ``deny`` with the rule's
  reasons and the policy hash; a call to a tool the agent does not have: ToolNode answers, nothing
  runs, and a ``deny`` is recorded (review R52; until then nothing was recorded); an approval: ``approval_required``, then on resume with a
  signed approval ``approval_given`` (``ref`` = the request, ``approver``), the ``allow`` naming
  the approver, the ``ok`` outcome; a resume with anything else: a ``deny`` whose ``ref`` is the
  request; a tool that calls ``interrupt()``: a ``paused`` outcome; an exhausted ``calls`` budget:
  a ``deny`` saying so, and the run ends.
- Delegations: a delegation the policy does not allow is a ``deny`` on ``agent:NAME`` by the
  supervisor, with its grant, the finding and the policy hash; the sub-agent's own refused call is
  a ``deny`` by the sub-agent's key on its own grant.
- Scheduler refusals (``Gate.arun``): a full queue (``Overloaded``), an open breaker
  (``CircuitOpen``), a deadline (``DeadlineExceeded``) and a call cancelled while it waited
  for a slot each leave an ``error`` outcome whose ``ref`` is the call's allow and whose reason
  names the exception; the reservation is released.
- Gateway: 400 ``malformed_approval`` and 429 ``quota_exceeded`` are ``deny`` entries by the
  caller; 400 ``invalid_request`` is a ``deny`` by ``unknown``; 502 ``backend_failed`` and 400
  ``rejected_by_backend`` come after an allow and leave an ``error`` outcome whose reason says why.
- GPU leases: refused (``deny``), granted, preempted (notice, then ``lease_preempted``), expired
  (``lease_expired``), each outcome by the holder with ``ref`` = the lease's decision.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import _http
import httpx
import pytest
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatResult
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, interrupt

from agentgate.audit.entry import AuditEntry
from agentgate.capabilities import Call
from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.broker import (
    Broker,
    CheckpointNotice,
    GangRequest,
    GatedBroker,
    TenantQuota,
    synthetic_topology,
)
from agentgate.dispatch.gateway import (
    APPROVAL_HEADER,
    Gateway,
    GatewayGate,
    GatewayServer,
    invocation_headers,
)
from agentgate.errors import CircuitOpen, DeadlineExceeded, Denied, Overloaded
from agentgate.gate import AgentIdentity, Approval, Gate
from agentgate.gate._config import scheduler_config
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent, delegation_tool
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.sim import SimServer
from agentgate.store import SQLiteStore
from agentgate.tasks import BreakerPolicy

GO = {"messages": [{"role": "user", "content": "go"}]}
NAMES = ("root", "boss", "helper", "dana")


def _policy(dids: dict[str, str], budget: str) -> str:
    return f"""
version: 1
trust_anchors:
  root: {{did: "{dids["root"]}"}}
tenants:
  lab: {{}}
principals:
  boss: {{kind: agent, did: "{dids["boss"]}", tenant: lab, roles: [boss]}}
  helper: {{kind: agent, did: "{dids["helper"]}", tenant: lab, roles: [helper]}}
  dana: {{kind: human, did: "{dids["dana"]}", tenant: lab, roles: [owner]}}
tools:
  search:
    args: {{query: {{type: string, required: true}}}}
    idempotent: true
    loggable: [query]
  refund:
    args: {{amount: {{type: number, required: true}}}}
  wire:
    args: {{to: {{type: string, required: true}}}}
  ask_user:
    args: {{}}
    idempotent: true
  boom:
    args: {{}}
    idempotent: true
  slow:
    args: {{}}
    idempotent: true
    concurrency: 1
    timeout_s: 30
  hang:
    args: {{}}
    idempotent: true
    timeout_s: 0.05
models:
  scripted: {{cost_per_mtok: {{input: 1000000, output: 1000000}}}}
roles:
  boss:
    kind: agent
    capabilities:
      - resource: tool:search
      - resource: tool:refund
        constraints: {{amount: {{le: 500}}}}
      - resource: tool:wire
      - resource: tool:ask_user
      - resource: tool:boom
      - resource: tool:slow
      - resource: tool:hang
      - resource: model:scripted
    budget: {budget}
    ttl_s: 3600
    delegation:
      max_depth: 1
      max_ttl_s: 600
      capabilities:
        - resource: tool:search
        - resource: tool:slow
        - resource: model:scripted
  helper:
    kind: agent
    capabilities:
      - resource: tool:search
      - resource: tool:slow
      - resource: model:scripted
    ttl_s: 1800
  owner:
    kind: human
    capabilities:
      - resource: tool:wire
    ttl_s: 3600
approvals:
  wire:
    resource: tool:wire
    approvers: [dana]
    expiry_s: 600
"""


@dataclass
class Setup:
    gate: Gate
    keys: dict[str, SigningKey]
    boss: AgentIdentity
    ran: list[str] = field(default_factory=list)

    def tools(self, *extra: BaseTool) -> list[BaseTool]:
        def search(query: str) -> str:
            self.ran.append(f"search:{query}")
            return f"results for {query}"

        def refund(amount: float) -> str:
            self.ran.append(f"refund:{amount}")
            return "refunded"

        def wire(to: str) -> str:
            self.ran.append(f"wire:{to}")
            return "wired"

        def ask_user() -> str:
            self.ran.append("ask_user")
            return str(interrupt({"question": "which account?"}))

        def boom() -> str:
            self.ran.append("boom")
            raise RuntimeError("secret-in-the-message")

        made = [
            StructuredTool.from_function(func=f, name=f.__name__, description=f"{f.__name__} tool")
            for f in (search, refund, wire, ask_user, boom)
        ]
        return [*made, *extra]

    def entries(self) -> list[AuditEntry]:
        """The entries of calls (the grants' own ``agent:NAME`` allows left out)."""
        self.gate.flush()
        return [
            e
            for e in self.gate.audit.entries()
            if not (e.kind == "allow" and (e.resource or "").startswith("agent:"))
        ]

    def verified(self) -> bool:
        self.gate.flush()
        return self.gate.verify().ok


def _make(tmp_path: Path, budget: str = "{limit: 1000000, unit: usd_micros}", **scheduler: Any) -> Setup:
    keys = {n: SigningKey.generate() for n in NAMES}
    policy = parse_policy(_policy({n: k.did for n, k in keys.items()}, budget), source="evidence.yaml")
    config = dataclasses.replace(scheduler_config(policy), **scheduler) if scheduler else None
    gate = Gate(policy, SQLiteStore(tmp_path / "agentgate.db"), scheduler=config)
    boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
    return Setup(gate, keys, boss)


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    made = _make(tmp_path)
    yield made
    made.gate.close()


class Scripted(ScriptedChatModel):
    """Sends its tool calls exactly as written (ids included: none, empty)."""

    def _answer(self, messages: list[BaseMessage]) -> tuple[AIMessage, dict[str, Any]]:
        n = sum(1 for m in messages if isinstance(m, AIMessage))
        template = self.turns[n] if n < len(self.turns) else AIMessage(content=self.final)
        payload = {"model": self.model_name, "messages": [{"content": "x" * 40}], "max_tokens": 8}
        return AIMessage(content=template.content, tool_calls=template.tool_calls), payload

    def _unserved(self, message: AIMessage, payload: dict[str, Any]) -> ChatResult:
        return super()._unserved(message, payload)


def _turn(*calls: tuple[str, dict[str, Any], Any]) -> AIMessage:
    return AIMessage(
        content="",
        tool_calls=[{"name": n, "args": a, "id": i, "type": "tool_call"} for n, a, i in calls],
    )


def _agent(s: Setup, *turns: AIMessage, tools: list[BaseTool] | None = None, **kwargs: Any) -> Any:
    kwargs.setdefault("gate_models", False)
    return create_gated_agent(
        s.gate, name="boss", model=Scripted(turns=list(turns)), tools=tools or s.tools(), **kwargs
    )


def _tool_messages(result: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in result["messages"] if isinstance(m, ToolMessage)]


def _is(
    entry: AuditEntry,
    kind: str,
    who: AgentIdentity | None,
    resource: str,
    *,
    ref: int | None = None,
    policy: str | None = None,
) -> None:
    """``entry`` is the ``kind`` entry docs/audit-format.md describes for ``who`` on ``resource``."""
    assert entry.kind == kind, entry
    assert entry.principal == (who.did if who else "unknown"), entry
    assert entry.chain_hash == (who.grant_id if who else None), entry
    assert entry.resource == resource, entry
    assert entry.ref == ref, entry
    if policy is not None:
        assert entry.policy_hash == policy, entry


# --- LangGraph: calls refused before the Gate decides them (fixed here) -------------------------


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("ident", [None, ""], ids=["none", "empty"])
async def test_a_tool_call_without_an_id_is_refused_and_recorded(
    setup: Setup, mode: str, ident: str | None
) -> None:
    agent = _agent(setup, _turn(("search", {"query": "q"}, ident), ("refund", {"amount": 1}, ident)))
    if mode == "sync":
        result = await asyncio.to_thread(agent.invoke, GO, context=setup.boss)
    else:
        result = await agent.ainvoke(GO, context=setup.boss)
    messages = _tool_messages(result)
    assert setup.ran == []
    # What the model is told is unchanged.
    assert [m.status for m in messages] == ["error", "error"]
    assert all(
        str(m.content).startswith("agentgate refused the call: the tool call has no id") for m in messages
    )
    assert all(m.artifact is None for m in messages)
    denied = setup.entries()
    assert sorted(e.resource for e in denied) == ["tool:refund", "tool:search"]
    for entry in denied:
        _is(entry, "deny", setup.boss, entry.resource, policy=setup.gate.policy.digest)
        assert entry.reasons[0].startswith("the tool call has no id")
        assert entry.args_digest is not None and entry.budget_delta == 0
    assert next(e for e in denied if e.resource == "tool:search").args == {"query": "q"}  # loggable
    assert next(e for e in denied if e.resource == "tool:refund").args == {}  # not loggable
    assert setup.verified()


@pytest.mark.parametrize("name", ["Search", "get weather", "search\n"])
def test_a_tool_whose_name_is_no_resource_name_is_refused_and_recorded(setup: Setup, name: str) -> None:
    def odd(query: str) -> str:
        setup.ran.append("odd")
        return "x"

    tool = StructuredTool.from_function(func=odd, name=name, description="odd")
    agent = _agent(setup, _turn((name, {"query": "q"}, "c1")), tools=setup.tools(tool))
    (message,) = _tool_messages(agent.invoke(GO, context=setup.boss))
    assert setup.ran == [] and message.status == "error"
    assert str(message.content).startswith("agentgate refused the call: resource name")
    (entry,) = setup.entries()
    _is(entry, "deny", setup.boss, f"tool:{name}", policy=setup.gate.policy.digest)
    assert "is not canonical" in entry.reasons[0]
    assert setup.verified()


def test_a_registered_tool_with_a_name_too_long_for_a_resource_is_recorded_cut(setup: Setup) -> None:
    name = "t" * 5000

    def long(query: str) -> str:
        setup.ran.append("long")
        return "x"

    tool = StructuredTool.from_function(func=long, name=name, description="long")
    agent = _agent(setup, _turn((name, {"query": "q"}, "c1")), tools=setup.tools(tool))
    (message,) = _tool_messages(agent.invoke(GO, context=setup.boss))
    assert setup.ran == [] and message.status == "error"
    assert "longer than 200 characters" in str(message.content)
    (entry,) = setup.entries()
    assert entry.kind == "deny" and entry.principal == setup.boss.did
    assert entry.resource == ("tool:" + name)[:200]
    digest = hashlib.sha256(name.encode()).hexdigest()
    assert any(f"5000 characters (sha256:{digest})" in r for r in entry.reasons)
    assert setup.verified()


def test_an_undecidable_call_without_an_identity_is_recorded_as_unknown(setup: Setup) -> None:
    agent = _agent(setup, _turn(("search", {"query": "q"}, None)))
    (message,) = _tool_messages(agent.invoke(GO, context=None))
    assert message.status == "error" and setup.ran == []
    (entry,) = setup.entries()
    _is(entry, "deny", None, "tool:search")
    assert setup.verified()


def test_with_enforce_an_undecidable_call_is_recorded_before_denied(setup: Setup) -> None:
    agent = _agent(setup, _turn(("search", {"query": "q"}, None)), enforce=True)
    with pytest.raises(Denied, match="has no id"):
        agent.invoke(GO, context=setup.boss)
    (entry,) = setup.entries()
    _is(entry, "deny", setup.boss, "tool:search")
    assert setup.verified()


def test_arguments_that_cannot_be_digested_are_a_recorded_deny(setup: Setup) -> None:
    agent = _agent(setup, _turn(("search", {"query": "\ud83d"}, "c1"), ("wire", {"to": "\ud83d"}, "c2")))
    messages = _tool_messages(agent.invoke(GO, context=setup.boss))
    assert [m.status for m in messages] == ["error", "error"] and setup.ran == []
    denied = setup.entries()
    assert sorted((e.kind, e.resource) for e in denied) == [("deny", "tool:search"), ("deny", "tool:wire")]
    assert all(e.principal == setup.boss.did and e.args_digest is None for e in denied)
    assert setup.verified()


def test_a_delegation_tool_for_a_sub_agent_with_a_capitalised_name_delegates_and_is_audited(
    setup: Setup,
) -> None:
    # Was: CapabilityError out of the supervisor's run (``Call.tool("ask_Helper")``).
    helper = create_gated_agent(
        setup.gate,
        name="Helper",
        model=Scripted(turns=[_turn(("search", {"query": "h"}, "h1"))]),
        tools=setup.tools(),
        gate_models=False,
    )
    ask = delegation_tool(
        setup.gate,
        name="Helper",
        agent=helper,
        key=setup.keys["helper"],
        capabilities=["tool:search"],
        ttl=timedelta(minutes=1),
    )
    agent = _agent(setup, _turn(("ask_Helper", {"task": "t"}, "d1")), tools=[ask])
    (message,) = _tool_messages(agent.invoke(GO, context=setup.boss))
    assert message.status == "success" and setup.ran == ["search:h"]
    ((_, child),) = setup.gate.delegations
    setup.gate.flush()
    granted = [e for e in setup.gate.audit.entries() if e.resource == "agent:Helper"]
    assert [(e.kind, e.principal, e.chain_hash) for e in granted] == [
        ("allow", setup.boss.did, setup.boss.grant_id)
    ]
    allow, outcome = setup.entries()
    _is(allow, "allow", child, "tool:search")
    _is(outcome, "outcome", child, "tool:search", ref=allow.index)
    assert setup.verified()


# --- LangGraph: decided calls -----------------------------------------------------------------


def test_allow_outcome_error_policy_deny_and_unknown_tool(setup: Setup) -> None:
    agent = _agent(
        setup,
        _turn(
            ("search", {"query": "ok"}, "s1"),
            ("boom", {}, "b1"),
            ("refund", {"amount": 900}, "r1"),
            ("no_such_tool", {}, "n1"),
        ),
    )
    by_id = {m.tool_call_id: m for m in _tool_messages(agent.invoke(GO, context=setup.boss))}
    assert by_id["s1"].status == "success" and by_id["b1"].status == "error"
    assert "secret-in-the-message" not in str(by_id["b1"].content)
    entries = setup.entries()
    policy = setup.gate.policy.digest
    search = [e for e in entries if e.resource == "tool:search"]
    boom = [e for e in entries if e.resource == "tool:boom"]
    refund = [e for e in entries if e.resource == "tool:refund"]
    _is(search[0], "allow", setup.boss, "tool:search", policy=policy)
    _is(search[1], "outcome", setup.boss, "tool:search", ref=search[0].index)
    assert search[1].status == "ok" and search[0].rule == "role boss rule 1"
    _is(boom[1], "outcome", setup.boss, "tool:boom", ref=boom[0].index)
    assert boom[1].status == "error" and boom[1].reasons == ("RuntimeError",)
    assert "secret-in-the-message" not in repr(entries)
    (deny,) = refund
    _is(deny, "deny", setup.boss, "tool:refund", policy=policy)
    assert any("amount" in r and "500" in r for r in deny.reasons)
    # A tool the agent does not have: ToolNode answers, nothing runs, and the refusal is recorded
    # (review R52: until then nothing was, though a model asking for a tool that is not there is
    # evidence a reviewer wants).
    assert "not a valid tool" in str(by_id["n1"].content)
    (unknown,) = [e for e in entries if e.resource == "tool:no_such_tool"]
    _is(unknown, "deny", setup.boss, "tool:no_such_tool")
    assert unknown.reasons == ("the agent has no tool named 'no_such_tool'; nothing ran",)
    assert len(entries) == 6 and setup.verified()


def test_approval_asked_given_and_run_each_recorded(setup: Setup) -> None:
    agent = _agent(setup, _turn(("wire", {"to": "alice"}, "w1")), checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    paused = agent.invoke(GO, config, context=setup.boss)
    (pending,) = paused["__interrupt__"]
    (asked,) = setup.entries()
    _is(asked, "approval_required", setup.boss, "tool:wire", policy=setup.gate.policy.digest)
    approval = setup.gate.approve(pending.value, setup.keys["dana"])
    agent.invoke(Command(resume=approval), config, context=setup.boss)
    assert setup.ran == ["wire:alice"]
    given, allow, outcome = setup.entries()[1:]
    dana = setup.keys["dana"].did
    assert (given.kind, given.principal, given.approver, given.ref) == (
        "approval_given",
        dana,
        dana,
        asked.index,
    )
    assert given.chain_hash == setup.boss.grant_id and given.resource == "tool:wire"
    assert given.reasons[0].startswith("request:") and given.reasons[2].startswith("signature:")
    _is(allow, "allow", setup.boss, "tool:wire")
    assert allow.approver == dana
    _is(outcome, "outcome", setup.boss, "tool:wire", ref=allow.index)
    assert setup.verified()


def test_an_approval_not_given_is_a_deny_referring_to_the_request(setup: Setup) -> None:
    agent = _agent(setup, _turn(("wire", {"to": "mallory"}, "w1")), checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    agent.invoke(GO, config, context=setup.boss)
    result = agent.invoke(Command(resume="no"), config, context=setup.boss)
    assert setup.ran == [] and [m.status for m in _tool_messages(result)] == ["error"]
    asked, declined = setup.entries()
    _is(declined, "deny", setup.boss, "tool:wire", ref=asked.index)
    assert any("approval declined" in r for r in declined.reasons)
    assert setup.verified()


def test_a_tool_that_interrupts_has_a_paused_outcome(setup: Setup) -> None:
    agent = _agent(setup, _turn(("ask_user", {}, "a1")), checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t"}}
    assert "__interrupt__" in agent.invoke(GO, config, context=setup.boss)
    allow, paused = setup.entries()
    _is(paused, "outcome", setup.boss, "tool:ask_user", ref=allow.index)
    assert paused.status == "paused" and paused.budget_delta == 0
    agent.invoke(Command(resume="acct-1"), config, context=setup.boss)
    again, done = setup.entries()[2:]
    _is(again, "allow", setup.boss, "tool:ask_user")
    _is(done, "outcome", setup.boss, "tool:ask_user", ref=again.index)
    assert done.status == "ok" and setup.verified()


def test_an_exhausted_budget_is_a_recorded_deny_and_ends_the_run(tmp_path: Path) -> None:
    s = _make(tmp_path, budget="{limit: 1, unit: calls}")
    try:
        agent = _agent(s, _turn(("search", {"query": "a"}, "s1")), _turn(("search", {"query": "b"}, "s2")))
        result = agent.invoke(GO, context=s.boss)
        assert s.ran == ["search:a"]
        last = result["messages"][-1]
        assert isinstance(last, AIMessage) and "budget exhausted" in str(last.content)
        allow, outcome, deny = s.entries()
        _is(outcome, "outcome", s.boss, "tool:search", ref=allow.index)
        assert outcome.budget_delta == 1
        _is(deny, "deny", s.boss, "tool:search", policy=s.gate.policy.digest)
        assert any("budget exhausted" in r for r in deny.reasons) and deny.budget_delta == 0
        assert s.verified()
    finally:
        s.gate.close()


def test_a_refused_delegation_and_a_sub_agents_refused_call_are_recorded(setup: Setup) -> None:
    helper = create_gated_agent(
        setup.gate,
        name="helper",
        model=Scripted(turns=[_turn(("refund", {"amount": 1}, "h1"))]),
        tools=setup.tools(),
        gate_models=False,
    )
    wide = delegation_tool(  # the policy lets boss hand on search, slow and the model only
        setup.gate,
        name="helper",
        agent=helper,
        key=setup.keys["helper"],
        capabilities=["tool:refund"],
        ttl=timedelta(minutes=1),
    )
    agent = _agent(setup, _turn(("ask_helper", {"task": "t"}, "d1")), tools=[wide])
    (message,) = _tool_messages(agent.invoke(GO, context=setup.boss))
    assert message.status == "error" and setup.ran == []
    (deny,) = setup.entries()
    _is(deny, "deny", setup.boss, "agent:helper", policy=setup.gate.policy.digest)
    assert "scope_creep:delegation_wider_than_policy" in deny.reasons

    narrow = delegation_tool(
        setup.gate,
        name="helper",
        agent=helper,
        key=setup.keys["helper"],
        capabilities=["tool:search"],
        ttl=timedelta(minutes=1),
    )
    agent = _agent(setup, _turn(("ask_helper", {"task": "t"}, "d2")), tools=[narrow])
    agent.invoke(GO, context=setup.boss)
    ((_, child),) = setup.gate.delegations
    (refused,) = setup.entries()[1:]
    _is(refused, "deny", child, "tool:refund", policy=setup.gate.policy.digest)
    assert setup.ran == [] and setup.verified()


# --- the scheduler's refusals (Gate.arun) ------------------------------------------------------


def _outcome_of(s: Setup, allow_index: int | None) -> AuditEntry:
    (outcome,) = [e for e in s.entries() if e.kind == "outcome" and e.ref == allow_index]
    return outcome


async def test_scheduler_refusals_and_a_cancelled_wait_each_leave_an_error_outcome(tmp_path: Path) -> None:
    s = _make(
        tmp_path,
        max_queued=1,
        breaker=BreakerPolicy(failure_threshold=1, reset_timeout_s=600, trip_on=("error",)),
    )
    try:
        gate, boss = s.gate, s.boss
        release = asyncio.Event()
        started = asyncio.Event()

        async def hold() -> str:
            started.set()
            await release.wait()
            return "held"

        def authorize(tool: str, call_id: str) -> Any:
            auth = gate.authorize(boss, Call.tool(tool), call_id=call_id)
            assert auth.allowed, auth.reasons
            return auth

        first = authorize("slow", "c1")
        running = asyncio.ensure_future(gate.arun(first, hold, call_id="c1"))
        await started.wait()
        queued_auth = authorize("slow", "c2")
        queued = asyncio.ensure_future(gate.arun(queued_auth, hold, call_id="c2"))
        while (await gate._async()).queued < 1:  # c2 waits for the one slot
            await asyncio.sleep(0.001)
        shed = authorize("slow", "c3")
        with pytest.raises(Overloaded):
            await gate.arun(shed, hold, call_id="c3")
        queued.cancel()  # cancelled while it waits for a slot
        with pytest.raises(asyncio.CancelledError):
            await queued
        release.set()
        assert await running == "held"

        async def fail() -> str:
            raise RuntimeError("boom")

        tripped = authorize("boom", "b1")
        with pytest.raises(RuntimeError):
            await gate.arun(tripped, fail, call_id="b1")
        refused = authorize("boom", "b2")
        with pytest.raises(CircuitOpen):
            await gate.arun(refused, fail, call_id="b2")

        async def forever() -> str:
            await asyncio.Event().wait()
            return "never"

        late = authorize("hang", "h1")
        with pytest.raises(DeadlineExceeded):
            await gate.arun(late, forever, call_id="h1")

        for auth, why in [
            (shed, "Overloaded"),
            (queued_auth, "CancelledError"),
            (refused, "CircuitOpen"),
            (late, "DeadlineExceeded"),
            (tripped, "RuntimeError"),
        ]:
            outcome = _outcome_of(s, auth.audit_index)
            _is(outcome, "outcome", boss, auth.call.resource, ref=auth.audit_index)
            assert outcome.status == "error" and outcome.reasons[0].startswith(why), outcome
        assert _outcome_of(s, first.audit_index).status == "ok"
        assert gate.budget_usage(boss)[boss.grant_id][0] == 0  # no tool call charged a usd budget
        held = gate.store.query("SELECT COUNT(*) FROM budget_reservations")[0][0]
        assert held == 0  # every reservation released
        assert s.verified()
    finally:
        s.gate.close()


# --- the gateway ---------------------------------------------------------------------------------

MODEL = "llama-3.1-8b"


def _gateway_policy(dids: dict[str, str]) -> str:
    return f"""
version: 1
trust_anchors:
  root: {{did: "{dids["root"]}"}}
tenants:
  lab: {{}}
principals:
  agent: {{kind: agent, did: "{dids["agent"]}", tenant: lab, roles: [chat]}}
  lead: {{kind: human, did: "{dids["lead"]}", roles: [lead]}}
models:
  {MODEL}: {{cost_per_mtok: {{input: 1000000, output: 1000000}}}}
roles:
  chat:
    kind: agent
    capabilities:
      - resource: model:{MODEL}
    budget: {{limit: 1000000, unit: usd_micros}}
    ttl_s: 3600
  lead:
    kind: human
    capabilities:
      - resource: model:{MODEL}
    ttl_s: 3600
quotas:
  two-per-decade:
    principal: agent
    # The longest window (windows are aligned to the epoch: an hour's window reset between the
    # allows below and the call that must be refused, once, in a run that crossed 17:00:00 UTC).
    window_s: 315360000
    limit: 2
    resources: ["model:*"]
approvals:
  long:
    resource: model:{MODEL}
    when: {{max_tokens: {{gt: 100}}}}
    approvers: [lead]
"""


@dataclass
class Gw:
    gate: GatewayGate
    server: GatewayServer
    backend: SimServer
    keys: dict[str, SigningKey]
    agent: AgentIdentity

    def post(self, body: Any, identity: AgentIdentity | None = None, **headers: str) -> httpx.Response:
        who = identity or self.agent
        signed = invocation_headers(who.key, who.chain, body) if isinstance(body, dict) else {}
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        return _http.post(
            f"{self.server.url}/chat/completions",
            content=content,
            headers={"content-type": "application/json", **signed, **headers},
            timeout=10,
        )

    def entries(self) -> list[AuditEntry]:
        self.gate.flush()
        return [e for e in self.gate.audit.entries() if not (e.resource or "").startswith("agent:")]


@pytest.fixture
def gw(tmp_path: Path) -> Iterator[Gw]:
    keys = {n: SigningKey.generate() for n in ("root", "agent", "lead", "thief")}
    policy = parse_policy(_gateway_policy({n: k.did for n, k in keys.items()}), source="gw.yaml")
    gate = GatewayGate(policy, SQLiteStore(tmp_path / "agentgate.db"))
    backend = SimServer(model_name=MODEL, time_scale=0.01).start()
    inventory = inventory_from_mapping(
        {"backends": [{"name": "sim", "url": backend.url, "engine": "vllm", "models": [MODEL]}]}
    )
    server = GatewayServer(Gateway(gate, inventory), port=0).start()
    agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="chat")
    try:
        yield Gw(gate, server, backend, keys, agent)
    finally:
        server.stop()
        backend.stop()
        gate.close()


def _chat(max_tokens: int = 4, text: str = "hi") -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens}


def test_gateway_refusals_and_failures_after_an_allow_are_each_recorded(gw: Gw) -> None:
    resource = f"model:{MODEL}"
    # 400 invalid_request: a body too malformed to name a caller's call: deny by "unknown"
    bad = gw.post(b"{not json", **{"authorization": f"Bearer {gw.agent.chain.token}"})
    assert bad.status_code == 400
    (unparsed,) = gw.entries()
    assert (unparsed.kind, unparsed.principal) == ("deny", "unknown")
    assert unparsed.policy_hash == gw.gate.policy.digest and unparsed.reasons

    # 400 malformed_approval on a call behind the approval gate: a deny by the caller
    answer = gw.post(_chat(max_tokens=200), **{APPROVAL_HEADER: "not json"})
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "malformed_approval"
    _is(gw.entries()[-1], "deny", gw.agent, resource, policy=gw.gate.policy.digest)

    # 502: each attempt failed at the backend after the allow: an error outcome saying why
    gw.backend.fault = "garbage"
    try:
        failed = gw.post(_chat())
    finally:
        gw.backend.fault = "none"
    assert failed.status_code in (502, 503), failed.text
    allow, outcome = gw.entries()[-2:]
    _is(allow, "allow", gw.agent, resource)
    _is(outcome, "outcome", gw.agent, resource, ref=allow.index)
    assert outcome.status == "error" and outcome.reasons[0].split(":")[0] in ("BackendFailed", "NoBackend")
    assert outcome.budget_delta == 0

    # 400 rejected_by_backend: a prompt over the backend's context, after the allow
    long = gw.post(_chat(max_tokens=50, text="word " * 140_000))
    assert long.status_code == 400 and long.json()["error"]["code"] == "rejected_by_backend", long.text
    allow, outcome = gw.entries()[-2:]
    _is(outcome, "outcome", gw.agent, resource, ref=allow.index)
    assert outcome.status == "error" and outcome.budget_delta == 0

    # 429 quota_exceeded: two calls fit the quota's window (the two allows above), the next is a deny
    over = gw.post(_chat())
    assert over.status_code == 429 and over.json()["error"]["code"] == "quota_exceeded", over.text
    deny = gw.entries()[-1]
    _is(deny, "deny", gw.agent, resource, policy=gw.gate.policy.digest)
    assert any("two-per-decade" in r for r in deny.reasons)
    assert gw.gate.verify().ok


def test_a_stolen_chain_is_not_recorded_as_its_holders_call(gw: Gw) -> None:
    body = _chat()
    thief = gw.keys["thief"]
    headers = invocation_headers(thief, gw.agent.chain, body)
    answer = _http.post(
        f"{gw.server.url}/chat/completions",
        content=json.dumps(body).encode(),
        headers={"content-type": "application/json", **headers},
        timeout=10,
    )
    assert answer.status_code == 401 and answer.json()["error"]["code"] == "wrong_holder"
    (deny,) = gw.entries()
    assert deny.kind == "deny"
    assert deny.principal != gw.agent.did  # the agent signed nothing
    assert gw.gate.verify().ok


# --- GPU leases ------------------------------------------------------------------------------

GPU_POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
tenants:
  team-a: {{}}
  team-b: {{}}
principals:
  trainer: {{kind: service, did: "{trainer}", tenant: team-a, roles: [trainer]}}
  other: {{kind: service, did: "{other}", tenant: team-b, roles: [trainer]}}
  lead: {{kind: human, did: "{lead}", tenant: team-a, roles: [lead]}}
  job: {{kind: service, did: "{job}", tenant: team-a, roles: [job]}}
roles:
  job:
    kind: service
    capabilities:
      - resource: gpu:h100
    ttl_s: 62
  trainer:
    kind: service
    capabilities:
      - resource: gpu:h100
        constraints: {{count: {{ge: 1, le: 8}}, priority: {{le: 1}}}}
    ttl_s: 3600
  lead:
    kind: human
    capabilities:
      - resource: gpu:h100
    ttl_s: 3600
{approvals}
"""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Gpu:
    gate: Gate
    gated: GatedBroker
    clock: Clock
    keys: dict[str, SigningKey]
    ids: dict[str, AgentIdentity]

    def entries(self) -> list[AuditEntry]:
        self.gate.flush()
        return [e for e in self.gate.audit.entries() if not (e.resource or "").startswith("agent:")]


def _gpu(tmp_path: Path, approvals: str = "") -> Gpu:
    keys = {n: SigningKey.generate() for n in ("root", "trainer", "other", "lead", "job")}
    text = GPU_POLICY.format(approvals=approvals, **{n: k.did for n, k in keys.items()})
    gate = Gate(parse_policy(text, source="gpu.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    clock = Clock()
    quotas = [TenantQuota("team-a", 16, cohort="lab"), TenantQuota("team-b", 8, cohort="lab")]
    broker = Broker(synthetic_topology(nodes=3, gpus_per_node=8), quotas, clock=clock, ttl_s=60)
    ids = {n: gate.issue(keys["root"], name=n, key=keys[n], role="trainer") for n in ("trainer", "other")}
    ids["job"] = gate.issue(keys["root"], name="job", key=keys["job"], role="job")
    return Gpu(gate, GatedBroker(gate, broker), clock, keys, ids)


@pytest.fixture
def gpu(tmp_path: Path) -> Iterator[Gpu]:
    made = _gpu(tmp_path)
    yield made
    made.gate.close()


def test_gpu_leases_refused_granted_preempted_and_expired_are_each_recorded(gpu: Gpu) -> None:
    trainer, other = gpu.ids["trainer"], gpu.ids["other"]
    refused = gpu.gated.submit(trainer, GangRequest("too-many", "x", 16, gpu_type="H100"))
    assert not refused.allowed
    (deny,) = gpu.entries()
    _is(deny, "deny", trainer, "gpu:h100", policy=gpu.gate.policy.digest)
    assert deny.args["count"] == 16 and deny.reasons

    decisions = {}
    for rid in ("low-1", "low-2", "low-3"):
        answer = gpu.gated.submit(trainer, GangRequest(rid, "x", 8, 0, gpu_type="H100"))
        assert answer.lease() is not None
        decisions[rid] = answer.authorization.audit_index
    for index in decisions.values():
        granted = [e for e in gpu.entries() if e.ref == index]
        assert [e.status for e in granted] == ["lease_granted"]
        _is(granted[0], "outcome", trainer, "gpu:h100", ref=index)

    reclaim = gpu.gated.submit(other, GangRequest("reclaim", "x", 8, 0, gpu_type="H100"))
    (notice,) = [e for e in reclaim.events if isinstance(e, CheckpointNotice)]
    victim = decisions[notice.lease.id]
    gpu.clock.now += 200  # the grace and every ttl pass
    gpu.gated.advance()
    for index in decisions.values():
        trail = [e for e in gpu.entries() if e.ref == index]
        for entry in trail:
            _is(entry, "outcome", trainer, "gpu:h100", ref=index)
        statuses = [e.status for e in trail]
        if index == victim:
            assert statuses == ["lease_granted", "lease_preempt_notice", "lease_preempted"]
        else:
            assert statuses == ["lease_granted", "lease_expired"]
        assert trail[-1].budget_delta == 0  # unpriced
    reclaimed = [e for e in gpu.entries() if e.ref == reclaim.authorization.audit_index]
    assert [e.status for e in reclaimed][:1] == ["lease_granted"]
    assert gpu.gate.verify().ok


def test_a_renewal_refused_for_outliving_its_grant_is_audited(gpu: Gpu) -> None:
    job = gpu.ids["job"]  # its grant lives 62 s
    # A lease a second shorter than what is left of the grant now (a fixed 61 s did not fit when
    # the set-up took over a second, on a loaded machine: review R63).
    ttl = int(job.chain.expires - time.time()) - 1
    assert ttl >= 30, ttl
    request = GangRequest("job-1", "x", 1, 0, gpu_type="H100", ttl_s=ttl)
    assert gpu.gated.submit(job, request).lease() is not None  # fits: more than ttl s are left
    while job.chain.expires - time.time() >= ttl:  # at most two seconds
        time.sleep(0.02)
    count = len(gpu.entries())
    with pytest.raises(Denied, match="outlive"):
        gpu.gated.renew(job, "job-1")
    added = gpu.entries()[count:]
    assert [(e.kind, e.resource, e.principal) for e in added] == [("deny", "gpu:h100", job.did)]


def test_a_renewal_behind_an_approval_gate_records_no_pending_approval(tmp_path: Path) -> None:
    made = _gpu(
        tmp_path,
        approvals="approvals: {big: {resource: gpu:h100, when: {count: {gt: 4}}, approvers: [lead]}}",
    )
    try:
        trainer = made.ids["trainer"]
        request = GangRequest("ft-1", "x", 8, gpu_type="H100")
        asked = made.gated.submit(trainer, request)
        approval = Approval.sign(asked.authorization.approval_payload(), made.keys["lead"])
        assert made.gated.submit(trainer, request, approval=approval).lease() is not None
        count = len(made.entries())
        made.clock.now += 30
        made.gated.renew(trainer, "ft-1")
        renewal = made.entries()[count:]
        assert [e.kind for e in renewal] != ["approval_required"], renewal
        pending = made.gate.store.query("SELECT COUNT(*) FROM approvals WHERE state = 'pending'")[0][0]
        assert pending == 0
    finally:
        made.gate.close()
