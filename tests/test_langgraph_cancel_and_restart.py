"""Defects found by the third review round (R22-R29) whose fixes lie outside the reviewers' paths
(agentgate/gate/, the lead's): each test failed on the code before its fix."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from test_audit_reconciliation import LOG_SEED, _keys, _read, _reconcile, traced_gateway
from test_audit_reconciliation import _policy_text as _r27_policy_text
from test_gate_once import PAY, RUN, _cli
from test_gate_once import _gate as _once_gate
from test_gate_once import _new as _once_new
from test_langgraph import NAMES, Team, _calls, _entries, _policy_text, _tool_messages, _tools
from test_langgraph import team as team  # the fixture

from agentgate.authority import GrantRepository, Invocation, revoke
from agentgate.capabilities import Call
from agentgate.dispatch.gateway import GatewayGate
from agentgate.dispatch.gateway._client import chat_call
from agentgate.errors import Revoked
from agentgate.gate import AgentIdentity, Approval, Gate
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore
from agentgate.store._postgres import PostgresStore

GO = {"messages": [{"role": "user", "content": "go"}]}


def _team_gate(
    path: Path, edit: Callable[[str], str] = str, *, budget: int = 1_000_000, unit: str = "usd_micros"
) -> tuple[Gate, dict[str, SigningKey], AgentIdentity]:
    """A gate over test_langgraph's team policy (``edit`` applied to its text) on a SQLite file,
    its keys, and the supervisor's identity."""
    keys = {n: SigningKey.generate() for n in NAMES}
    text = edit(_policy_text({n: k.did for n, k in keys.items()}, budget, unit))
    gate = Gate(parse_policy(text, source="team.yaml"), SQLiteStore(path))
    supervisor = gate.issue(keys["root"], name="supervisor", key=keys["supervisor"], role="supervisor")
    return gate, keys, supervisor


async def test_a_tool_call_cancelled_while_it_waited_for_a_slot_runs_when_the_thread_is_resumed(
    tmp_path: Path,
) -> None:
    # search is not idempotent here, with a concurrency of 2. Three parallel calls: two run and
    # hold both slots, the third waits for one. The run is cancelled. The third call never
    # started, yet its once-only key is marked "error" (ran and failed), so resuming the thread
    # refuses it: "already ran and failed ... it may have had its effect", and `agentgate tasks
    # unsettled` lists it for a person to settle.
    gate, _, supervisor = _team_gate(
        tmp_path / "agentgate.db", lambda text: text.replace("idempotent: true", "idempotent: false")
    )
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


_CRASHING_SUB_AGENT = """
import asyncio, json, os, sys
from datetime import timedelta
from pathlib import Path
sys.path.insert(0, sys.argv[3])
from test_langgraph import NAMES, _calls, _policy_text
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from agentgate.authority._grant import parse_chain
from agentgate.gate import AgentIdentity, Gate
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent, delegation_tool
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

stage, d = sys.argv[1], Path(sys.argv[2])

async def pay(query: str) -> str:
    with open(d / "effects.txt", "a") as f:
        f.write(query + "\\n")
    if stage == "first":
        os._exit(3)  # the process dies after the effect, before the tool's result is saved
    return "paid"

async def main() -> None:
    if stage == "first":
        keys = {n: SigningKey.generate() for n in NAMES}
        (d / "keys.json").write_text(json.dumps({n: k.seed.hex() for n, k in keys.items()}))
    else:
        seeds = json.loads((d / "keys.json").read_text())
        keys = {n: SigningKey(bytes.fromhex(s)) for n, s in seeds.items()}
    text = _policy_text({n: k.did for n, k in keys.items()}, 1_000_000).replace("idempotent: true", "idempotent: false")
    gate = Gate(parse_policy(text, source="team.yaml"), SQLiteStore(d / "agentgate.db"))
    if stage == "first":
        sup = gate.issue(keys["root"], name="supervisor", key=keys["supervisor"], role="supervisor")
        (d / "chain.txt").write_text(sup.chain.token)
    else:
        sup = AgentIdentity("supervisor", keys["supervisor"], parse_chain((d / "chain.txt").read_text()))
    tool = StructuredTool.from_function(coroutine=pay, name="search", description="search")
    researcher = create_gated_agent(
        gate, name="researcher", model=ScriptedChatModel(turns=[_calls(("search", {"query": "pay 100"}))]), tools=[tool]
    )
    ask = delegation_tool(
        gate, name="researcher", agent=researcher, key=keys["researcher"],
        capabilities=["tool:search", "model:scripted"], ttl=timedelta(minutes=5),
    )
    config = {"configurable": {"thread_id": "x"}}
    async with AsyncSqliteSaver.from_conn_string(str(d / "checkpoints.sqlite")) as saver:
        supervisor = create_gated_agent(
            gate, name="supervisor", model=ScriptedChatModel(turns=[_calls(("ask_researcher", {"task": "pay"}))]),
            tools=[ask], checkpointer=saver,
        )
        first = {"messages": [{"role": "user", "content": "go"}]} if stage == "first" else None
        await supervisor.ainvoke(first, config, context=sup, durability="sync")
    gate.close()

asyncio.run(main())
"""


def test_a_sub_agents_once_only_tool_does_not_run_again_after_a_crash_and_restart(tmp_path: Path) -> None:
    # A tool that is not idempotent runs at most once per tool call, "in this process and after a
    # restart alike" (docs/langgraph.md): the same call decided again after a crash is refused
    # (started, outcome never recorded). For a sub-agent it runs again: after the restart the
    # delegation tool hands the sub-agent a fresh grant, and the once-only key holds the grant
    # id, so the call resumed from the checkpoint is a new key and pays twice.
    script = tmp_path / "crash.py"
    script.write_text(_CRASHING_SUB_AGENT)
    tests = str(Path(__file__).resolve().parent)
    for stage, code in (("first", 3), ("second", 0)):
        done = subprocess.run(
            [sys.executable, str(script), stage, str(tmp_path), tests],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == code, done.stderr[-2000:]
    assert (tmp_path / "effects.txt").read_text().splitlines() == ["pay 100"]


async def test_an_approved_call_cancelled_while_it_waited_for_a_slot_keeps_its_approval(
    tmp_path: Path,
) -> None:
    # publish needs dana's approval and runs one at a time. An approved call waits for the slot
    # another publish holds; the client gives up (the run is cancelled). The call never started,
    # yet its approval stays consumed: resuming the thread replays the approval, which is
    # refused as "already used", and the model is told "Do not retry this call". A call that
    # pauses (interrupt() inside the tool) gets its approval put back (ApprovalStore.rearm); one
    # that never started should too.
    gate, keys, supervisor = _team_gate(
        tmp_path / "agentgate.db",
        lambda text: text.replace("    loggable: [path]", "    loggable: [path]\n    concurrency: 1"),
    )
    ran: list[str] = []
    hold = asyncio.Event()

    async def publish(path: str) -> str:
        ran.append(path)
        if path == "reports/busy":
            await hold.wait()
        return f"published {path}"

    tool = StructuredTool.from_function(coroutine=publish, name="publish", description="publish")

    def publisher(path: str) -> object:
        model = ScriptedChatModel(turns=[_calls(("publish", {"path": path}))])
        return create_gated_agent(
            gate,
            name="supervisor",
            model=model,
            tools=[tool],
            checkpointer=InMemorySaver(),
            gate_models=False,
        )

    busy, agent = publisher("reports/busy"), publisher("reports/final")
    busy_config, config = {"configurable": {"thread_id": "busy"}}, {"configurable": {"thread_id": "t"}}
    try:
        paused = await busy.ainvoke(GO, busy_config, context=supervisor)  # type: ignore[attr-defined]
        approval = gate.approve(paused["__interrupt__"][0].value, keys["dana"])
        holding = asyncio.create_task(
            busy.ainvoke(Command(resume=approval), busy_config, context=supervisor)  # type: ignore[attr-defined]
        )
        while not ran:
            await asyncio.sleep(0.01)
        paused = await agent.ainvoke(GO, config, context=supervisor)  # type: ignore[attr-defined]
        approval = gate.approve(paused["__interrupt__"][0].value, keys["dana"])
        task = asyncio.create_task(agent.ainvoke(Command(resume=approval), config, context=supervisor))  # type: ignore[attr-defined]
        await asyncio.sleep(0.3)  # the approved call waits for publish's one slot
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        hold.set()
        await holding
        resumed = await agent.ainvoke(None, config, context=supervisor)  # type: ignore[attr-defined]
        answers = [str(m.content)[:160] for m in _tool_messages(resumed)]
        assert ran == ["reports/busy", "reports/final"], answers
    finally:
        gate.close()


async def test_a_call_that_no_cancellation_stops_is_recorded_and_charged_as_it_ended(tmp_path: Path) -> None:
    # Gate.arun(preemptible=False): a tool in a worker thread, its caller cancelled while it runs.
    # The attempt runs to its end and has its effect; it used to be recorded as an error
    # (CancelledError) with its reservation released: a calls budget did not count it.
    gate, _, supervisor = _team_gate(tmp_path / "agentgate.db", budget=10, unit="calls")
    started, release = threading.Event(), threading.Event()

    def search() -> str:
        started.set()
        release.wait(10)
        return "found"

    try:
        auth = gate.authorize(supervisor, Call.tool("search", {"query": "x"}), call_id="c1")
        assert auth.allowed
        task = asyncio.create_task(gate.arun(auth, lambda: asyncio.to_thread(search), preemptible=False))
        await asyncio.to_thread(started.wait, 10)
        task.cancel()
        await asyncio.sleep(0.05)
        release.set()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        assert task.cancelled()
        (outcome,) = [e for e in _entries(gate) if e.kind == "outcome"]
        assert (outcome.status, outcome.budget_delta) == ("ok", 1)
        assert gate.remaining(supervisor)[supervisor.grant_id] == (1, 10)
    finally:
        gate.close()


# Review R23: a long-running process

R23_POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker]}}
  alice: {{kind: human, did: "{alice}"}}
tools:
  lookup:
    args: {{id: {{type: string, required: true}}}}
    idempotent: true
  pay:
    args: {{amount: {{type: integer, required: true}}}}
roles:
  worker:
    kind: agent
    capabilities: [{{resource: tool:lookup}}, {{resource: tool:pay}}]
    budget: {{limit: 1000000, unit: calls}}
    ttl_s: 600
approvals:
  pay:
    resource: tool:pay
    approvers: [alice]
    expiry_s: 1
"""


def _r23_gate(path: Path, keys: dict[str, SigningKey]) -> Gate:
    text = R23_POLICY.format(root=keys["root"].did, agent=keys["agent"].did, alice=keys["alice"].did)
    return Gate(parse_policy(text, source="r23.yaml"), SQLiteStore(path))


def _threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("agentgate-")}


def test_a_gate_dropped_without_close_leaves_no_thread_behind(tmp_path: Path) -> None:
    """The outcome writer thread (agentgate-outcomes) holds the Gate strongly (its commit and tick
    are the Gate's bound methods), so a Gate dropped without close() is never collected: its two
    threads, its SQLite connections (about 7 descriptors) and everything it holds stay for the
    life of the process, per Gate."""
    keys = {n: SigningKey.generate() for n in ("root", "agent", "alice")}
    path = tmp_path / "agentgate.db"
    with _r23_gate(path, keys) as gate:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
    before = _threads()
    for _ in range(10):
        dropped = _r23_gate(path, keys)
        auth = dropped.authorize(agent, Call.tool("lookup", {"id": "x"}))
        dropped.run(auth, lambda: 1)
        dropped.flush()
        del dropped, auth
    deadline = time.monotonic() + 5
    while _threads() - before and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.05)
    assert not _threads() - before, f"{len(_threads() - before)} threads left by 10 dropped gates"


def test_approval_requests_never_answered_are_forgotten_once_expired(tmp_path: Path) -> None:
    """Gate._open_requests keeps every approval request asked in this process until it is
    answered; one never answered (the run was abandoned) stays after it expired, so a service
    whose agents ask for approvals that nobody answers grows by one entry per request, forever."""
    keys = {n: SigningKey.generate() for n in ("root", "agent", "alice")}
    with _r23_gate(tmp_path / "agentgate.db", keys) as gate:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        for i in range(200):
            auth = gate.authorize(agent, Call.tool("pay", {"amount": i}), call_id=f"c{i}", run_id=f"r{i}|t")
            assert auth.needs_approval
        time.sleep(1.1)  # every request has expired
        for i in range(200, 400):
            gate.authorize(agent, Call.tool("pay", {"amount": i}), call_id=f"c{i}", run_id=f"r{i}|t")
        held = len(gate._open_requests)
    assert held <= 250, f"{held} approval requests held, 200 of them expired"


# Review R26: the command line for scripts


def test_python_dash_m_agentgate_runs_the_command() -> None:
    # In a container without the console script on PATH, `python -m agentgate` is the way to run
    # it; agentgate has no __main__.py, so it fails ("is a package and cannot be directly executed").
    done = subprocess.run(
        [sys.executable, "-m", "agentgate", "policy", "schema"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("{")


# Review R29: authority over time

R29_POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [chat]}}
  lead: {{kind: human, did: "{lead}", roles: [lead]}}
models:
  m: {{cost_per_mtok: {{input: 1, output: 1}}}}
roles:
  chat:
    kind: agent
    capabilities:
      - resource: model:m
    budget: {{limit: 1000000, unit: usd_micros}}
    ttl_s: 3600
  lead:
    kind: human
    capabilities:
      - resource: model:m
    ttl_s: 3600
approvals:
  every-call:
    resource: model:m
    approvers: [lead]
"""


def test_gate_revoke_with_a_reason_holding_a_lone_surrogate_revokes(tmp_path: Path) -> None:
    """Gate.revoke puts the raw reason in its audit entry; the audit log refuses a lone surrogate
    (InputError), the transaction rolls back, and the grant stays alive."""
    keys = {n: SigningKey.generate() for n in ("root", "agent", "lead")}
    policy = parse_policy(R29_POLICY.format(**{n: k.did for n, k in keys.items()}), source="p.yaml")
    gate = Gate(policy, SQLiteStore(tmp_path / "agentgate.db"))
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="chat")
        gate.revoke(agent, reason="key leaked \udcff")
        assert gate.grants.revoked(agent.chain.ids) == {agent.chain.id}
    finally:
        gate.close()


class _RevokedMeanwhile(GatewayGate):
    """Another process (``agentgate grant revoke``) revokes the caller's grant while the gateway
    checks the approval: after the authority's decision, before the allow is recorded."""

    path: Path
    victim: str | None = None

    def _approval_complete(self, approval: Any, request: Mapping[str, Any], verdict: Any) -> Any:
        if self.victim is not None:
            with SQLiteStore(self.path) as other:
                repo = GrantRepository(other)
                revoke(repo, self.victim)
                repo.close()
        return super()._approval_complete(approval, request, verdict)


def test_a_gated_gateway_call_is_not_allowed_after_its_grant_was_revoked(tmp_path: Path) -> None:
    keys = {n: SigningKey.generate() for n in ("root", "agent", "lead")}
    policy = parse_policy(R29_POLICY.format(**{n: k.did for n, k in keys.items()}), source="p.yaml")
    _RevokedMeanwhile.path = tmp_path / "agentgate.db"
    gate = _RevokedMeanwhile(policy, SQLiteStore(_RevokedMeanwhile.path))
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="chat")
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10}
        call = chat_call(body)

        def send(approval: str | None = None) -> Any:
            inv = Invocation.sign(agent.key, agent.chain, call)
            return gate.authorize_invocation(agent.chain.token, inv.encode(), call, (5, 10), approval)

        asked = send()
        assert asked.auth.needs_approval
        approval = json.dumps(Approval.sign(asked.auth.approval_payload(), keys["lead"]).to_dict())
        gate.victim = agent.chain.id
        answered = send(approval)
        gate.flush()
        kinds = [e.kind for e in gate.audit.entries()]
        # The revocation returned before the allow was written: the log shows an allow, over a
        # revoked grant, after the revocation took effect, and the model call runs.
        assert not answered.allowed, kinds
        assert (answered.status, answered.code) == (401, "revoked")
        assert kinds[-1] == "deny"
    finally:
        gate.close()


# Review R27: evidence completeness


@pytest.fixture
def r27_gate(tmp_path: Path) -> Any:
    made = Gate(
        parse_policy(_r27_policy_text(), source="r27.yaml"),
        SQLiteStore(tmp_path / "a.db"),
        log_key=SigningKey(LOG_SEED),
    )
    yield made
    made.close()


def test_declining_an_approval_that_was_given_and_used_writes_no_contradicting_refusal(
    r27_gate: Gate,
) -> None:
    gate = r27_gate
    """``Gate.decline`` of a request whose approval was given, consumed, and whose call ran wrote
    a ``deny`` 'approval declined' referring to the same ``approval_required`` entry as the
    ``approval_given`` and the ``allow``: the log then says the request was both approved (the
    call ran, outcome ok) and declined. A second decline wrote a second refusal of it."""
    keys = _keys()
    boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
    call = Call.tool("transfer", {"to": "x"})
    asked = gate.authorize(boss, call, call_id="t1")
    approval = Approval.sign(dict(asked.request or {}), keys["dana"])
    allowed = gate.authorize(boss, call, call_id="t1", approval=approval)
    gate.run(allowed, lambda: "sent", call_id="t1")
    with pytest.raises(Exception):  # noqa: B017 - an InputError is the fix proposed; any refusal will do
        gate.decline(asked)
    gate.flush()
    entries = _read(gate.store)
    refusals = [e for e in entries if e["kind"] == "deny" and e["ref"] == asked.audit_index]
    assert refusals == [], "the log says this approved, used request was declined"


def test_a_model_call_charged_as_reserved_says_so_in_its_outcome(r27_gate: Gate) -> None:
    gate = r27_gate
    """A model call that ran and reported no usage (``spent`` returns ``None``: a chat model
    without usage metadata) is charged its whole reservation, as documented, but its ``outcome``
    is a plain ``ok`` whose ``budget_delta`` reads as the tokens it used: an auditor cannot tell
    the fallback from a measured usage. The outcome should say it (as the ``USAGE_UNREAD`` case
    does: 'charged as reserved')."""
    keys = _keys()
    boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
    auth = gate.authorize(boss, Call.model("scripted", {}), tokens=(100, 200))
    gate.run(auth, lambda: "hi", spent=lambda _: None)
    gate.flush()
    (outcome,) = [e for e in _read(gate.store) if e["kind"] == "outcome"]
    assert outcome["budget_delta"] == 300
    assert any("charged as reserved" in r for r in outcome["reasons"]), outcome["reasons"]


def test_the_gateway_does_not_export_the_reservation_as_the_usage_of_a_call_without_usage(
    tmp_path: Path,
) -> None:
    """A backend answer without ``usage`` is charged its reservation (docs/gateway.md), but the
    call's span then carries ``gen_ai.usage.input_tokens``/``output_tokens`` = the reservation
    (the request's max_tokens as output tokens): telemetry reports usage no backend reported, and
    the audit outcome says nothing of the fallback either."""
    from test_gateway import MODEL

    from agentgate.dispatch.gateway import invocation_headers

    with traced_gateway(tmp_path) as served:
        gate, keys = served.gate, served.keys
        try:
            agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="chat")
            body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 64}
            served.backend.mode = "no_usage"
            answer = httpx.post(
                f"{served.url}/chat/completions",
                json=body,
                headers=invocation_headers(agent.key, agent.chain, body),
                timeout=10,
            )
            assert answer.status_code == 200
            gate.flush()
            entries = _read(gate.store)
            _reconcile(entries, gate.store)
            (outcome,) = [e for e in entries if e["kind"] == "outcome"]
            (span,) = [s for s in served.exporter.get_finished_spans() if s.name == f"chat {MODEL}"]
        finally:
            gate.close()
    attributes = dict(span.attributes or {})
    assert attributes.get("gen_ai.usage.output_tokens") != 64, "max_tokens exported as the usage"
    assert any("charged as reserved" in r for r in outcome["reasons"]), outcome["reasons"]


def test_a_refused_delegations_span_links_to_its_refusal(tmp_path: Path) -> None:
    """A delegation the policy refuses, asked through the LangGraph delegation tool, is audited
    (a ``deny`` on ``agent:NAME``), but its ``execute_tool ask_NAME`` span carries no
    ``agentgate.audit.index`` nor ``agentgate.decision``: every other refusal's span links to its
    entry, and a granted delegation's span does too."""
    from datetime import timedelta

    from langchain_core.messages import AIMessage
    from test_observability import Sweep, _calls

    from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent, delegation_tool

    sweep = Sweep(tmp_path)
    try:
        helper = create_gated_agent(
            sweep.gate, name="helper", model=ScriptedChatModel(turns=[AIMessage(content="x")]), tools=[]
        )
        ask = delegation_tool(
            sweep.gate,
            name="helper",
            agent=helper,
            key=sweep.keys["helper"],
            capabilities=["tool:vault"],  # beyond what the boss's delegation rule hands on
            ttl=timedelta(minutes=5),
        )
        model = ScriptedChatModel(turns=[_calls(("ask_helper", {"task": "t"})), AIMessage(content="done")])
        boss = create_gated_agent(sweep.gate, name="boss", model=model, tools=[ask])
        boss.invoke({"messages": [{"role": "user", "content": "go"}]}, context=sweep.boss)
        sweep.gate.flush()
        entries = _read(sweep.gate.store)
        (refusal,) = [e for e in entries if e["kind"] == "deny" and e["resource"] == "agent:helper"]
        (span,) = [s for s in sweep.exporter.get_finished_spans() if s.name == "execute_tool ask_helper"]
    finally:
        sweep.gate.close()
    attributes = dict(span.attributes or {})
    assert attributes.get("agentgate.decision") == "deny"
    assert attributes.get("agentgate.audit.index") == refusal["index"]


def test_a_call_still_running_is_not_settled_by_hand_as_lost(r27_gate: Gate) -> None:
    gate = r27_gate
    """``agentgate tasks unsettled`` lists a once-only call that is still running as ``started``,
    like one whose process died, and ``tasks settle --not-run`` settles it: the log then holds
    'settled by hand: it did not run' and, when the call ends, its real ``ok`` outcome for the same
    allow, and the call may be decided and run again (in another process: a second payment).
    ``settle`` should refuse a ``started`` call that may still be running (its allow younger than
    a minimum age, e.g. ``--older-than``, default 15 minutes) unless told otherwise."""
    import threading
    import time

    from agentgate.errors import InputError
    from agentgate.store.once import settle

    keys = _keys()
    boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
    allowed = gate.authorize(boss, Call.tool("explode", {}), call_id="pay-1")
    release = threading.Event()
    running = threading.Thread(target=lambda: gate.run(allowed, lambda: release.wait(10), call_id="pay-1"))
    running.start()
    try:
        time.sleep(0.2)
        ((key, state),) = gate.store.query("SELECT key, state FROM agentgate_once")
        assert state == "started"
        with pytest.raises(InputError):
            settle(gate.store, gate.audit, key, ran=False, by="ops", reason="looked stuck")
    finally:
        release.set()
        running.join()


def test_the_command_refuses_to_settle_a_call_allowed_moments_ago(tmp_path: Path) -> None:
    # `agentgate tasks settle` without --older-than: a call allowed moments ago may still run.
    keys, path, agent = _once_new(tmp_path)
    with _once_gate(path, keys) as gate:
        assert gate.authorize(agent, PAY, call_id="c1", run_id=RUN).allowed
        gate.flush()
        ((key,),) = gate.store.query("SELECT key FROM agentgate_once")
    code, _ = _cli("tasks", "settle", key, "--not-run", "--store", str(path))
    assert code == 2
    code, _ = _cli("tasks", "settle", key, "--not-run", "--older-than", "0", "--store", str(path))
    assert code == 0


def test_a_delegation_from_a_grant_revoked_meanwhile_records_no_allow(tmp_path: Path) -> None:
    # Gate.delegate read revocation before it checked the policy and signed the child, outside the
    # transaction that records the grant: a revocation that returned in between still got an
    # `allow` for the delegation in the log (the child was dead anyway; the evidence was wrong).
    path = tmp_path / "agentgate.db"

    class RevokedMeanwhile(Gate):
        victim: str | None = None

        def _check_delegation_rule(self, *args: Any) -> None:
            super()._check_delegation_rule(*args)
            if self.victim is not None:
                with SQLiteStore(path) as other:  # another process: agentgate grant revoke
                    repo = GrantRepository(other)
                    revoke(repo, self.victim)
                    repo.close()

    keys = {n: SigningKey.generate() for n in NAMES}
    gate = RevokedMeanwhile(
        parse_policy(_policy_text({n: k.did for n, k in keys.items()}, 1000)), SQLiteStore(path)
    )
    try:
        supervisor = gate.issue(keys["root"], name="supervisor", key=keys["supervisor"], role="supervisor")
        gate.victim = supervisor.grant_id
        with pytest.raises(Revoked):
            gate.delegate(
                supervisor,
                name="researcher",
                key=keys["researcher"],
                capabilities=["tool:search"],
                ttl=timedelta(minutes=5),
            )
        delegations = [e for e in _entries(gate) if e.resource == "agent:researcher"]
        assert [e.kind for e in delegations] == ["deny"]
    finally:
        gate.close()


# Review R28: the dispatcher's session affinity


def test_an_agents_model_calls_carry_its_thread_as_the_dispatchers_session(team: Team) -> None:
    # docs/dispatch.md: a session's (agent run's) backend is kept while it meets the SLO, so a
    # conversation's turns find their prefix in that backend's cache. Gate.dispatch passed no
    # session, so the product's own model calls never had affinity.
    from agentgate.dispatch import inventory_from_mapping
    from agentgate.dispatch.dispatcher import Dispatcher
    from agentgate.dispatch.router import Router
    from agentgate.sim import SimServer

    server = SimServer(model_name="scripted", time_scale=0.1).start()
    try:
        backend = {"name": "sim-0", "url": server.url, "engine": "vllm", "models": ["scripted"]}
        inventory = inventory_from_mapping({"backends": [backend]})
        router = Router(inventory)
        team.gate.attach_dispatcher(Dispatcher(inventory, router))
        model = ScriptedChatModel(turns=[_calls(("search", {"query": "kv"}))], served_by=team.gate)
        agent = create_gated_agent(team.gate, name="supervisor", model=model, tools=_tools(team))
        config = {"configurable": {"thread_id": "conversation-7"}}
        agent.invoke({"messages": [{"role": "user", "content": "go"}]}, config, context=team.supervisor)
        assert server.served == 2
        assert dict(router._sessions) == {"conversation-7": "sim-0"}
    finally:
        server.stop()


def test_a_refusal_for_an_expired_approval_refers_to_its_request(tmp_path: Path) -> None:
    # R27: a refusal because the approval expired had ref null, so the log alone could not tie it
    # to the approval_required entry of the request it ends (a declined request's refusal can).
    keys = {n: SigningKey.generate() for n in ("root", "agent", "alice")}
    with _r23_gate(tmp_path / "agentgate.db", keys) as gate:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        pay = Call.tool("pay", {"amount": 5})
        asked = gate.authorize(agent, pay, call_id="c1", run_id="r|t")
        approval = Approval.sign(asked.approval_payload(), keys["alice"])
        time.sleep(1.1)  # the request (expiry_s: 1) has expired
        refused = gate.authorize(agent, pay, call_id="c1", run_id="r|t", approval=approval)
        assert not refused.allowed and "expired" in " ".join(refused.reasons)
        (entry,) = [e for e in gate.audit.entries() if e.index == refused.audit_index]
        assert (entry.kind, entry.ref) == ("deny", asked.audit_index)


# Review R30: PostgreSQL in operation


@pytest.mark.postgres
def test_an_outcome_pending_across_a_server_restart_is_committed_later(postgres_server: Any) -> None:
    """A model call ran and its outcome waits for the background commit (``linger_s``). The
    server restarts (``pg_ctl stop -m fast``, down half a second): the commit takes a pooled
    connection the restart killed, fails, and ``Gate._write_outcomes`` logs "1 outcomes not
    recorded" and drops the batch (an outage longer than the pool's timeout does the same).
    The log keeps an allow without an outcome and the reservation (20) stays held for good,
    although the Gate still held the outcome and its next transaction could have committed it,
    as a decision that carried it and failed does (``PendingOutcomes.restore``)."""
    store = PostgresStore(postgres_server.create_database())
    gate = Gate(parse_policy(_r27_policy_text(), source="r30.yaml"), store)
    keys = _keys()
    boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
    auth = gate.authorize(boss, Call.model("scripted"), tokens=(10, 10))
    postgres_server.stop("fast")
    try:
        assert gate.run(auth, lambda: "hi", spent=lambda _: (1, 1)) == "hi"  # the call ran
        time.sleep(0.5)  # the background commit fails on a dead connection and drops the outcome
    finally:
        postgres_server.start()
    deadline = time.monotonic() + 5
    outcomes: list[Any] = []
    while not outcomes and time.monotonic() < deadline:  # the first use of a pooled connection may fail
        gate.flush()
        outcomes = [e for e in gate.audit.entries() if e.kind == "outcome"]
        time.sleep(0.1)
    assert [o.ref for o in outcomes] == [auth.audit_index]
    assert gate.remaining(boss)[boss.grant_id][0] == 2  # charged what it spent, not the 20 reserved
    gate.close()
