"""Review R48 (mutation testing of the Gate, fourth round): the mutants the third round left
unrun or unpinned. Each test kills a mutant that no other test killed; its docstring names the
mutant and the rule it pins."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from test_gate_run_mutants import Setup

from agentgate.capabilities import Call
from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.dispatcher import Dispatcher
from agentgate.dispatch.quota import TenantQuota
from agentgate.dispatch.router import Router
from agentgate.errors import Denied, Shed
from agentgate.gate import Approval, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.sim import SimServer
from agentgate.store import SQLiteStore

_STREAM_POLICY = """
version: 1
tools:
  search.web: {}
"""

PAYLOAD = {"model": "llama-3.1-8b", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 12}


def _until(condition: Any, what: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {seconds}s: {what}")
        time.sleep(0.01)


def test_a_streamed_call_is_charged_and_shed_under_its_callers_tenant(tmp_path: Path) -> None:
    """Mutant d3: ``Gate.dispatch_stream`` forwarded tenant "default" to the dispatcher whatever
    the caller named. Rule: a streamed call is routed under its caller's tenant: it spends that
    tenant's token bucket, and once the bucket is spent, with the backend saturated, that tenant's
    next streamed call is shed for its quota while another tenant's waits and is served."""
    server = SimServer(time_scale=1.0).start()  # real time: a 2,000-token answer holds its slot
    try:
        inventory = inventory_from_mapping(
            {
                "backends": [
                    {
                        "name": "b0",
                        "url": server.url,
                        "engine": "vllm",
                        "models": ["llama-3.1-8b"],
                        "max_concurrency": 1,
                    }
                ]
            }
        )
        quotas = {
            "acme": TenantQuota(rate_tokens_per_s=0.001, burst_tokens=1),
            "beta": TenantQuota(rate_tokens_per_s=1e6, burst_tokens=1e6),
        }
        router = Router(inventory, quotas=quotas)
        (tmp_path / "policy.yaml").write_text(_STREAM_POLICY)
        with Gate.open(tmp_path / "policy.yaml", store=str(tmp_path / "gate.db")) as gate:
            gate.attach_dispatcher(Dispatcher(inventory, router, slo_ttft_s=5.0))
            # acme's first streamed call is served (the backend is free) and spends its bucket.
            assert "".join(c.content for c in gate.dispatch_stream(PAYLOAD, tenant="acme"))
            # Another tenant holds the only slot.
            holder = gate.dispatch_stream({**PAYLOAD, "max_tokens": 2000}, tenant="other")
            assert next(holder).backend == "b0"
            # acme is over its quota under saturation: shed at once, naming its tenant.
            with pytest.raises(Shed, match="tenant 'acme' is over its token quota"):
                next(gate.dispatch_stream(PAYLOAD, tenant="acme"))
            # beta, within its quota, waits in line and is served once the slot frees.
            got: list[Any] = []
            reader = threading.Thread(
                target=lambda: got.append(
                    "".join(c.content for c in gate.dispatch_stream(PAYLOAD, tenant="beta"))
                )
            )
            reader.start()
            # The router's line (no public view): beta's call is told to wait, not shed.
            _until(lambda: len(router._waiters) == 1, "beta's call waits in line")
            holder.close()
            reader.join(timeout=30)
            assert not reader.is_alive()
            assert got and got[0]
    finally:
        server.stop()


def test_an_allow_is_run_only_by_the_gate_that_decided_it_not_a_twin_on_the_same_store(
    tmp_path: Path,
) -> None:
    """Mutant s1: ``_seal`` without the Gate (``weakref.ref(self)`` dropped), so an allow matched
    any Gate whose fields it carries. Rule: a Gate runs only the allows it decided itself; another
    Gate, even one over the same store and policy, refuses it and does not run the call."""
    setup = Setup(tmp_path)
    twin = Gate(parse_policy(setup.text, source="gate.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    try:
        auth = setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": "x"}))
        assert auth.allowed, auth.explain()
        ran: list[str] = []
        with pytest.raises(Denied, match="another Gate's"):
            twin.run(auth, lambda: ran.append("twin"))
        assert ran == []
        # The allow is still unused: the Gate that decided it runs it.
        assert setup.gate.run(auth, lambda: "found") == "found"
    finally:
        twin.close()
        setup.gate.close()


def test_an_outcome_unwritable_for_a_reason_not_the_stores_is_dropped_not_failing_later_decisions(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Mutant o17: ``_carry_all`` turning only a ``StoreError`` into ``_CarryFailed``. Rule: an
    outcome that cannot be written for a reason other than the store's (here its reservation was
    settled meanwhile: an ``InputError``) is logged and dropped; it is neither kept for ever nor
    allowed to fail every later decision that carries it."""
    setup = Setup(tmp_path)
    try:
        auth = setup.gate.authorize(setup.agent, Call.model("small"), tokens=(10, 10))
        assert auth.allowed and auth.reservations, auth.explain()
        setup.gate.ledger.release(auth.reservations[0][0])  # settled behind the gate's back
        setup.gate.run(auth, lambda: "answer")
        setup.gate.flush()
        for n in range(2):  # later decisions carry nothing that fails them
            later = setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": str(n)}))
            assert later.allowed, later.explain()
        assert "not recorded:" in caplog.text and "already settled" in caplog.text
        assert not [e for e in setup.entries() if e.kind == "outcome" and e.ref == auth.audit_index]
    finally:
        setup.gate.close()


_TWO_TENANTS = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
tenants:
  team-a: {{}}
  team-b: {{}}
principals:
  agent-a: {{kind: agent, did: "{a}", tenant: team-a, roles: [worker]}}
  agent-b: {{kind: agent, did: "{b}", tenant: team-b, roles: [worker]}}
tools:
  refund:
    args: {{amount: {{type: integer, required: true}}}}
roles:
  worker:
    kind: agent
    capabilities:
      - resource: tool:refund
    ttl_s: 600
    delegation:
      max_depth: 1
      capabilities:
        - resource: tool:refund
"""


def test_a_once_only_call_is_scoped_to_its_tenant_not_shared_with_anothers(tmp_path: Path) -> None:
    """Mutant n5: ``_once_key`` keying every once-only call under tenant "default". Rule: the key
    that marks a non-idempotent call as run is scoped to the caller's tenant: the same sub-agent
    key, delegated by agents of two tenants, making the same call under the same run and call
    ids, runs in each tenant; with one key for both, the second tenant's call would be refused as
    run before and handed the first tenant's key (its kept answer)."""
    keys = {n: SigningKey.generate() for n in ("root", "a", "b", "helper")}
    text = _TWO_TENANTS.format(**{n: k.did for n, k in keys.items()})
    with Gate(parse_policy(text, source="gate.yaml"), SQLiteStore(tmp_path / "agentgate.db")) as gate:
        helpers = []
        for name in ("a", "b"):
            agent = gate.issue(keys["root"], name=f"agent-{name}", key=keys[name], role="worker")
            helpers.append(
                gate.delegate(
                    agent,
                    name="helper",
                    key=keys["helper"],
                    capabilities=["tool:refund"],
                    ttl=timedelta(seconds=60),
                )
            )
        assert [gate.tenant_of(h) for h in helpers] == ["team-a", "team-b"]
        call = Call.tool("refund", {"amount": 5})
        first = gate.authorize(helpers[0], call, call_id="call-1", run_id="thread-1")
        assert first.allowed and first.once_key is not None, first.explain()
        gate.run(first, lambda: "refunded for team-a", call_id="call-1", run_id="thread-1")
        other = gate.authorize(helpers[1], call, call_id="call-1", run_id="thread-1")
        assert other.allowed, other.explain()
        assert other.once_key not in (None, first.once_key)
        # The precondition: in its own tenant the call is known to have run.
        again = gate.authorize(helpers[0], call, call_id="call-1", run_id="thread-1")
        assert not again.allowed and again.once_key == first.once_key


def test_a_dispatched_call_keeps_its_sessions_backend(tmp_path: Path) -> None:
    """Mutant d2: ``Gate.dispatch`` forwarding ``session=None`` to the dispatcher. Rule: the calls
    of one session (an agent run's thread) go to the backend its first call went to, whose cache
    holds its prefix, while that backend meets the SLO; without the session, equal backends are
    drawn at random and the conversation is spread over both."""
    servers = [SimServer(time_scale=0.05).start() for _ in range(2)]
    try:
        inventory = inventory_from_mapping(
            {
                "backends": [
                    {"name": f"b{i}", "url": s.url, "engine": "vllm", "models": ["llama-3.1-8b"]}
                    for i, s in enumerate(servers)
                ]
            }
        )
        (tmp_path / "policy.yaml").write_text(_STREAM_POLICY)
        with Gate.open(tmp_path / "policy.yaml", store=str(tmp_path / "gate.db")) as gate:
            gate.attach_dispatcher(Dispatcher(inventory, Router(inventory, seed=7), slo_ttft_s=30.0))

            def ask(n: int, session: str | None) -> str:
                payload = {**PAYLOAD, "messages": [{"role": "user", "content": f"question {n}"}]}
                return gate.dispatch(payload, session=session).backend

            # The precondition: without a session the two backends are both drawn.
            assert len({ask(n, None) for n in range(12)}) == 2
            first = ask(100, "conversation")
            assert [ask(n, "conversation") for n in range(101, 109)] == [first] * 8
    finally:
        for server in servers:
            server.stop()


def test_an_approval_already_used_is_refused_even_when_the_call_was_asked_for_again(
    tmp_path: Path,
) -> None:
    """Mutant a7: ``_superseded`` treating any expired approval as replaced by the newer request
    (``own.state != "consumed"`` dropped). Rule: an approval that was used is refused when it is
    presented again, also once its request has expired and the same call was asked for again
    meanwhile: it is a replay, not an approval that came too late, and it ends the new request."""
    setup = Setup(tmp_path)
    setup.gate.close()
    text = setup.text.replace("    approvers: [lead]\n", "    approvers: [lead]\n    expiry_s: 1\n", 1)
    refund = "  refund:\n    args: {amount: {type: integer, required: true}}\n"
    text = text.replace(refund, refund + "    idempotent: true\n", 1)  # may be decided again
    assert text.count("expiry_s: 1") == 1 and text.count("idempotent: true") == 2
    with Gate(parse_policy(text, source="gate.yaml"), SQLiteStore(tmp_path / "short.db")) as gate:
        agent = gate.issue(setup.keys["root"], name="agent", key=setup.keys["agent"], role="worker")
        call = Call.tool("refund", {"amount": 500})
        asked = gate.authorize(agent, call, call_id="c1", run_id="run-1")
        approval = Approval.sign(asked.approval_payload(), setup.keys["lead"])
        used = gate.authorize(agent, call, call_id="c1", run_id="run-1", approval=approval)
        assert used.allowed, used.explain()
        gate.run(used, lambda: "refunded", call_id="c1", run_id="run-1")
        time.sleep(1.1)  # the first request has expired
        # The same call decided again without the approval: a new request is opened.
        again = gate.authorize(agent, call, call_id="c1", run_id="run-1")
        assert again.needs_approval and again.request["id"] != approval.request, again.explain()
        replay = gate.authorize(agent, call, call_id="c1", run_id="run-1", approval=approval)
        assert not replay.allowed and not replay.needs_approval, replay.explain()


@pytest.mark.postgres
def test_an_outcome_put_while_a_failed_commit_is_retried_is_not_lost(
    postgres_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Mutant o29: ``PendingOutcomes.restore`` replacing what is pending with the outcomes it puts
    back (``self._items = list(items)``) instead of putting them in front. Rule: an outcome that
    arrives while the background commit of earlier ones fails (here a lock the commit cannot get
    within the database's ``lock_timeout``) is kept with them, and both are recorded once the
    store answers again; else the second call's allow never gets an outcome and its reservation
    stays held."""
    import psycopg

    from agentgate.store._postgres import PostgresStore
    from agentgate.store.audit import APPEND_LOCK

    with psycopg.connect(postgres_url, autocommit=True) as admin:
        (name,) = admin.execute("SELECT current_database()").fetchone() or ("",)
        admin.execute(f"ALTER DATABASE \"{name}\" SET lock_timeout = '2s'")
    setup = Setup(tmp_path)
    setup.gate.close()
    with Gate(parse_policy(setup.text, source="gate.yaml"), PostgresStore(postgres_url)) as gate:
        agent = gate.issue(setup.keys["root"], name="agent", key=setup.keys["agent"], role="worker")
        first, second = (gate.authorize(agent, Call.model("small"), tokens=(10, 10)) for _ in range(2))
        with psycopg.connect(postgres_url, autocommit=True) as holder:
            holder.execute("SELECT pg_advisory_lock(%s)", (APPEND_LOCK,))

            def commit_waits() -> bool:
                found = holder.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                ).fetchone()
                return bool(found and found[0])

            gate.run(first, lambda: "one", spent=lambda _: (1, 1))
            _until(commit_waits, "the background commit of the first outcome waits for the lock")
            gate.run(second, lambda: "two", spent=lambda _: (2, 2))
            _until(lambda: "not recorded yet" in caplog.text, "the commit failed and kept the first outcome")
            holder.execute("SELECT pg_advisory_unlock(%s)", (APPEND_LOCK,))
        gate.flush()
        outcomes = [e.ref for e in gate.audit.entries() if e.kind == "outcome"]
        assert sorted(outcomes) == sorted([first.audit_index, second.audit_index])
