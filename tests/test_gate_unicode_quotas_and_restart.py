"""Defects found by this session's reviews (R13, R14, R15) whose fixes lie outside the reviewers'
paths (agentgate/gate.py, the approvals and quota stores, agentgate/_json.py, the command line's
shared helpers): each test failed on the code before its fix."""

from __future__ import annotations

import logging
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from langchain_core.tools import StructuredTool
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from test_gateway_hostile_backends import Env, _body, _in_service, _settled
from test_gateway_hostile_backends import env as env  # the fixtures
from test_gateway_hostile_backends import hostile as hostile
from test_langgraph import NAMES, Team, _calls, _entries, _policy_text, _publisher
from test_langgraph import team as team  # the fixture
from test_observability import Sweep
from test_observability_gate_spans import _team

from agentgate.capabilities import Call
from agentgate.cli.main import main
from agentgate.dispatch.gateway import GatewayGate
from agentgate.gate import Gate
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore


def test_authorize_records_a_refusal_for_arguments_that_are_not_valid_unicode_behind_an_approval_gate(
    team: Team,
) -> None:
    # Without an approval gate such a call is a recorded deny; behind one, _approval_request's
    # argument_digest raises InputError out of authorize (its docstring: never raises for a
    # refused call), and nothing is recorded.
    call = Call.tool("publish", {"path": "reports/\ud83d"})
    auth = team.gate.authorize(team.supervisor, call, agent="supervisor", call_id="c1")
    assert not auth.allowed
    assert [e.kind for e in _entries(team.gate) if e.resource == "tool:publish"] == ["deny"]


def test_a_program_that_ends_without_gate_close_keeps_its_last_outcomes(tmp_path: Path) -> None:
    # The quickstart (and README's "Using it") never call gate.close(): the outcome of the last
    # call waits up to 20 ms for the daemon thread "agentgate-outcomes", which dies with the
    # interpreter. The outcome entry is lost and its reservation stays held (2 runs in 3 lost it
    # when following docs/quickstart.md literally).
    # Each attempt is a program of its own that ends without gate.close(): one child interpreter
    # imports once, then forks a process per attempt, which builds its Gate, runs the agent and
    # ends as a script does (SystemExit, the interpreter's own finalization, its daemon threads
    # dying with it). The imports, not the race, were what five fresh interpreters repeated.
    script = f"""
import os, sys
sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})
from pathlib import Path
from test_langgraph import _make_team, _calls, _tools
from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent
for where in sys.argv[1:]:
    sys.stdout.flush(); sys.stderr.flush()
    if os.fork() == 0:
        team = _make_team(Path(where))
        model = ScriptedChatModel(turns=[_calls(("search", {{"query": "x"}}))], final="")
        agent = create_gated_agent(team.gate, name="supervisor", model=model, tools=_tools(team), gate_models=False)
        agent.invoke({{"messages": [("user", "go")]}}, context=team.supervisor)
        sys.exit(0)  # the program's end, as at the end of the quickstart's script
    _, status = os.wait()
    if status != 0:
        sys.exit(f"{{where}}: the program exited with status {{status}}")
"""
    attempts = [tmp_path / str(attempt) for attempt in range(5)]
    for where in attempts:
        where.mkdir()
    subprocess.run([sys.executable, "-c", script, *map(str, attempts)], check=True, timeout=120)
    for attempt, where in enumerate(attempts):
        entries = [
            bytes(row[0]) for row in SQLiteStore(where / "agentgate.db").query("SELECT entry FROM audit_log")
        ]
        assert sum(b'"kind":"outcome"' in entry for entry in entries) == 1, f"attempt {attempt}: outcome lost"


def test_a_resume_after_a_restart_leaves_no_request_waiting_for_votes(team: Team) -> None:
    # After a restart the resumed node asks Gate.authorize without the approval first, and the
    # new Gate (its in-process _open_requests is empty) opens a SECOND request for the same call;
    # the approval then consumes the first. The second stays pending: `agentgate approval list`
    # shows a call that already ran as "waiting for votes", and the approval_given entry refers
    # (ref) to the second request's approval_required entry while naming the first request.
    db = team.path / "checkpoints.sqlite"
    config = {"configurable": {"thread_id": "restart"}}
    with sqlite3.connect(db, check_same_thread=False) as conn:
        paused = _publisher(team.gate, SqliteSaver(conn), team).invoke(
            {"messages": [{"role": "user", "content": "go"}]}, config, context=team.supervisor
        )
    conn.close()
    payload = paused["__interrupt__"][0].value
    gate = team.reopen()
    with sqlite3.connect(db, check_same_thread=False) as conn:
        agent = _publisher(gate, SqliteSaver(conn), team)
        agent.invoke(
            Command(resume=gate.approve(payload, team.keys["dana"])), config, context=team.supervisor
        )
    conn.close()
    assert team.ran == ["publish:reports/final"]
    assert gate.approvals.open_records() == []
    asked = [e.index for e in _entries(gate) if e.kind == "approval_required"]
    given = [e for e in _entries(gate) if e.kind == "approval_given"]
    assert asked == [asked[0]] and [e.ref for e in given] == [asked[0]]


QUOTA_POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
principals:
  a: {{kind: agent, did: "{agent}", roles: [r]}}
models:
  small:
    cost_per_mtok: {{input: 50000, output: 80000}}
roles:
  r:
    kind: agent
    capabilities: [{{resource: "model:small"}}]
    ttl_s: 600
quotas:
  q: {{principal: a, window_s: 60, limit: 1000000, unit: {unit}, resources: ["model:*"]}}
"""


@pytest.mark.parametrize("unit", ["tokens", "usd_micros"])
def test_an_amount_no_quota_column_can_hold_is_a_recorded_refusal(tmp_path: Path, unit: str) -> None:
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    text = QUOTA_POLICY.format(root=keys["root"].did, agent=keys["agent"].did, unit=unit)
    gate = Gate(parse_policy(text, source="q.yaml"), SQLiteStore(tmp_path / "s.db"))
    try:
        agent = gate.issue(keys["root"], name="a", key=keys["agent"], role="r")
        before = len(list(gate.audit.entries()))
        auth = gate.authorize(agent, Call.model("small"), tokens=(10**30, 0))  # OverflowError here
        assert not auth.allowed and auth.quota_exceeded is not None
        assert len(list(gate.audit.entries())) == before + 1
    finally:
        gate.close()


def test_a_call_whose_arguments_hold_a_cycle_is_a_typed_error_not_a_hang() -> None:
    """``agentgate/_json.py`` ``is_plain`` walks containers with a stack and no visited set: a
    dict that holds itself loops for ever (it never grows the stack, so no MemoryError either).
    ``args_digest`` (authority) and ``argument_digest`` (audit) call it first, so
    ``Gate.authorize(agent, Call.model("m", {"x": cyclic}))`` hangs inside
    ``Authority.decide_held``, within the decision's open store transaction. Model arguments are
    not declared, so the policy lets such a value through. The reference encoder would refuse it
    ("Circular reference detected"). Run in a child process: on the current code it never ends."""
    script = (
        "from agentgate.authority import args_digest\n"
        "from agentgate.errors import TokenFormatError\n"
        "a = {}; a['x'] = a\n"
        "try:\n    args_digest({'a': a})\nexcept TokenFormatError:\n    print('refused')\n"
    )
    try:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:
        raise AssertionError("args_digest of a cyclic value never returned") from None
    assert done.stdout.strip() == "refused", done.stderr[-300:]


@pytest.mark.parametrize("verb", [["audit", "verify"], ["tasks", "unsettled"]])
def test_a_read_verb_never_prints_the_password_of_a_connection_string(
    verb: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENTGATE_STORE", "host=db.example password=hunter2 dbname=agentgate")
    assert main(verb) == 2
    err = capsys.readouterr().err
    assert "hunter2" not in err
    assert "postgresql://" in err


def test_a_failed_dispatch_is_audited_with_why_it_failed(env: Env) -> None:
    """R16: a gateway call whose backend answered a redirect (or garbage, or nothing) was
    audited ``error`` with the exception's class alone (``BackendFailed``); why it failed was only
    in the gateway's log. The outcome now keeps the (key-scrubbed) message beside the class."""
    _in_service(env)
    env.backend.mode = "redirect"
    count = len(env.outcomes())
    answer = env.post(_body())
    assert answer.status_code in (502, 503), answer.text
    reasons = _settled(env, count + 1)[-1].reasons
    assert any(r.startswith(("BackendFailed: ", "NoBackend: ")) and "302" in r for r in reasons), reasons
    env.backend.mode = "ok"


async def test_a_sync_tool_past_its_timeout_under_ainvoke_answers_with_its_result(tmp_path: Path) -> None:
    """R15: under ainvoke a sync tool runs in a worker thread that no cancellation stops. Past its
    timeout it ran to its end (a refund went through) but the model was told it failed, and the
    outcome said ``error``: a model may then ask again under a new call id (a second refund).
    Under ``invoke`` the same tool's result is returned. It now is under ``ainvoke`` too."""
    ran: list[str] = []

    def search(query: str) -> str:
        time.sleep(0.5)
        ran.append(query)
        return "found"

    keys = {name: SigningKey.generate() for name in NAMES}
    text = _policy_text({n: k.did for n, k in keys.items()}, 1_000_000)
    gate = Gate(
        parse_policy(
            text.replace("concurrency: 2", "concurrency: 1\n    timeout_s: 0.1"), source="team.yaml"
        ),
        SQLiteStore(tmp_path / "agentgate.db"),
    )
    try:
        identity = gate.issue(keys["root"], name="supervisor", key=keys["supervisor"], role="supervisor")
        tool = StructuredTool.from_function(func=search, name="search", description="search")
        model = ScriptedChatModel(turns=[_calls(("search", {"query": "q"}))])
        agent = create_gated_agent(gate, name="supervisor", model=model, tools=[tool], gate_models=False)
        result = await agent.ainvoke({"messages": [{"role": "user", "content": "go"}]}, context=identity)
        answers = [m for m in result["messages"] if m.type == "tool"]
        assert ran == ["q"]
        assert [(m.status, m.content) for m in answers] == [("success", "found")]
        assert [e.status for e in _entries(gate) if e.kind == "outcome"] == ["ok"]
    finally:
        gate.close()


def test_an_unquoted_exponent_without_a_dot_is_a_number_as_in_yaml_1_2() -> None:
    """R13: ``timeout_s: 1e3`` (a float in YAML 1.2, which docs/policy-reference.md says plain
    scalars follow) was read as text and refused with the hint "write the value unquoted"."""
    from agentgate._yaml import load_yaml

    data, _ = load_yaml("a: 1e3\nb: -2E-3\nc: '1e3'\nd: 1e3x\n", source="t.yaml")
    assert data == {"a": 1000.0, "b": -0.002, "c": "1e3", "d": "1e3x"}


def test_an_approval_gate_on_a_model_call_is_no_lint_error() -> None:
    """docs/gateway.md ("Calls behind an approval gate") puts a model call behind a gate on
    `max_tokens`, and the Gate and the gateway enforce it; `policy lint` called that policy broken
    (gate_on_undeclared_argument: "guards model:..., which names no declared tool", exit 1)."""
    from agentgate.policy import lint

    policy = parse_policy(
        """
version: 1
trust_anchors: {root: {did: did:key:z6MkqQP5oTUxZ95rgbJg29FwyrJ5N8HrRPpEBQbPrAUCkPXm}}
principals:
  bot: {kind: service, did: did:key:z6Mkn6co2nAe6kgBR8cNPwkVv7k6U393ZCNwQcMtXk9mB1gj, roles: [chat]}
  lead: {kind: human, did: did:key:z6Mktk1iFd7YoyEirJoqYtcfNUtMa5nUhqkrQsgX9tmc5Npj}
models:
  qwen3-32b: {cost_per_mtok: {input: 1, output: 1}}
roles:
  chat:
    capabilities: [{resource: "model:qwen3-32b", constraints: {max_tokens: {le: 4096}}}]
    ttl_s: 600
approvals:
  long-answers:
    resource: model:qwen3-32b
    when: {max_tokens: {gt: 100}}
    approvers: [lead]
""",
        source="gated-model.yaml",
    )
    assert [f.code for f in lint(policy)] == []


def test_store_init_creates_every_table_once_and_again_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """R18: no command made every table for a least-privilege PostgreSQL role (docs/operations.md
    had a Python snippet); `agentgate store init` does, on SQLite here and PostgreSQL in
    tests/test_docs_formats_second_verifier.py (the page's set-up, run as printed)."""
    url = str(tmp_path / "s.db")
    assert main(["store", "init", "--store", url]) == 0
    first = capsys.readouterr().out.splitlines()
    assert (
        first[0] == "audit log: ready"
        and len(first) == 12
        and all(line.endswith(": ready") for line in first)
    )
    tables = {row[0] for row in SQLiteStore(url).query("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {
        "audit_log",
        "audit_refs",
        "agentgate_grants",
        "budget_ledger",
        "approvals",
        "approval_asked",
    } <= tables
    assert main(["store", "init", "--store", url]) == 0
    assert capsys.readouterr().out.splitlines() == first


def test_a_tenant_preempting_its_own_lease_while_another_is_reclaimed_stays_within_its_quota() -> None:
    """R17 (left open there): a request nominated by preemption was granted as soon as its
    victims ended, without counting its tenant's other notified leases, still held for their
    grace: research (at most 12 GPUs) held its new gang and its reclaimed lease, 16, for the
    rest of that lease's 300 s grace. It now waits for them, and gets its GPUs when they end."""
    from agentgate.dispatch.broker import Broker, GangRequest, TenantQuota, synthetic_topology

    now = [0.0]
    quotas = [
        TenantQuota("research", nominal=8, cohort="lab", borrowing_limit=4),
        TenantQuota("prod", nominal=8, cohort="lab"),
    ]
    broker = Broker(synthetic_topology(4, 8), quotas, clock=lambda: now[0], ttl_s=600.0, grace_s=120.0)
    broker.submit(GangRequest("rB", "research", 8, priority=0, grace_s=300))
    broker.submit(GangRequest("rA", "research", 4, priority=1, grace_s=10))
    broker.submit(GangRequest("p1", "prod", 8))  # reclaims rB (300 s of grace)
    now[0] = 1.0
    broker.submit(GangRequest("rC", "research", 8, priority=2))  # preempts rA (10 s of grace)

    def research() -> int:
        return sum(len(lease.gpus) for lease in broker.leases() if lease.tenant == "research")

    for t in range(2, 330, 5):
        now[0] = float(t)
        broker.advance()
        assert research() <= 12, (t, sorted(lease.id for lease in broker.leases()))
    assert sorted(lease.id for lease in broker.leases()) == ["p1", "rC"] and broker.queue() == []


CHAT_POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [chat]}}
models:
  m: {{cost_per_mtok: {{input: 1, output: 1}}}}
roles:
  chat:
    kind: agent
    capabilities:
      - resource: model:m
    budget: {{limit: 1000000, unit: usd_micros}}
    ttl_s: 3600
"""

# What an OpenAI SDK pointed at the gateway sends as its Bearer token: the user's provider key.
PROVIDER_KEY = "sk-proj-Q7xW9kPzR4mN2vB8cT5yH1jL6fD3gS0aE"


def test_a_provider_key_sent_as_the_bearer_token_is_quoted_nowhere(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``parse_chain`` refuses a token that is not ``ag1.…`` quoting its first 16 characters; the
    gateway keeps that text as the refusal's reason: in the audit log (signed, kept for good,
    exported), in the 401 answer and, were the 401 traced, in the span. The caller's secret
    (``sk-proj-Q7xW9kPz``: 8 secret characters of an OpenAI key) lands in the evidence."""
    caplog.set_level(logging.DEBUG)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    policy = parse_policy(CHAT_POLICY.format(**{n: k.did for n, k in keys.items()}), source="p.yaml")
    gate = GatewayGate(policy, SQLiteStore(tmp_path / "agentgate.db"), tracer=provider.get_tracer("r20"))
    try:
        decision = gate.authorize_invocation(PROVIDER_KEY, "x", Call.model("m"), (1, 1))
        assert decision.status == 401
        secret = PROVIDER_KEY[len("sk-proj-") :][:8]
        evidence = [
            e.model_dump_json() if hasattr(e, "model_dump_json") else repr(e) for e in gate.audit.entries()
        ]
        assert evidence, "the refusal is audited"
        seen = "\n".join(
            [*evidence, decision.message, caplog.text, *(s.to_json() for s in exporter.get_finished_spans())]
        )
        assert secret not in seen
    finally:
        gate.close()


def test_a_delegation_span_links_to_the_audit_entry_of_the_grant_it_made(tmp_path: Path) -> None:
    """``Gate.delegate`` audits every delegation (an ``allow`` entry for ``agent:NAME``), and
    docs/operations.md says the decision is on the span with ``agentgate.audit.index``, "the
    signed audit entry it links to". The ``execute_tool ask_helper`` span carries
    ``agentgate.decision=allow`` and the grant id but no audit index: the trace of a delegation
    cannot be joined to its evidence (langgraph.py ``_delegated``)."""
    sweep = Sweep(tmp_path)
    try:
        _team(sweep).invoke({"messages": [{"role": "user", "content": "go"}]}, context=sweep.boss)
        (span,) = [s for s in sweep.exporter.get_finished_spans() if s.name == "execute_tool ask_helper"]
        assert span.attributes is not None and span.attributes["agentgate.decision"] == "allow"
        delegated = [e.index for e in sweep.gate.audit.entries() if e.resource == "agent:helper"]
        assert delegated and span.attributes.get("agentgate.audit.index") == delegated[0]
    finally:
        sweep.gate.close()
