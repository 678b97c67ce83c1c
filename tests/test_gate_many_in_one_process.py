"""Several Gates, stores, policies, trust roots and keyrings in one process (a
server hosting many teams, or a test session), and the process-wide state that could carry a
decision from one of them into another.

The process-wide state of agentgate, as found (``lru_cache``, module dicts, ``ContextVar``,
``atexit``, class attributes): ``authority._chain_cache._SHARED_CACHE`` (the chain cache of the
module ``decide``), ``authority._signatures._KEY_CACHE`` (did -> raw key, a pure function of the string),
``store.grants._revoked_sql``/``_consume_sql``/``_consume_pg_sql`` and ``store._postgres._to_pyformat``
(SQL text by arity: pure), ``audit.entry._second`` (the formatted second of the clock),
``gate._gate._pending_approval`` (a ``ContextVar``) and ``_OPEN_GATES`` with its one ``atexit``
hook, ``tasks._waiter.RUNNING`` (a ``ContextVar``), ``tasks._metrics._COLLECTORS`` (per Prometheus
registry, weakly), ``integrations.langgraph._delegation._DELEGATION_TOOLS`` (weakly, by ``id``). Per object,
not global: each ``Authority`` (so each ``Gate``) has its own ``ChainCache``, each ``GatewayGate``
its own parsed-chain cache, each ``PolicyIndex`` its own quota cache.

What holds:

- a chain verified (and cached) under one Gate's trust root is refused by a Gate with another
  root (``untrusted_root``), and that refusal does not reach back into the first Gate; the module
  ``decide`` (one process-wide cache) keys its cache on the trust anchors, and re-reads time and
  revocation on every decision, whichever repository it is given;
- revocation lives in its store only: revoked in one store, a chain is refused there at once
  (though its verification is cached) and still allowed by a Gate on another store;
- an approval given at one Gate is no approval at a Gate on another store; an allow of one Gate
  does not run on another (its seal names the Gate);
- two Gates on one database in one process (two ``SQLiteStore`` objects on one file, or two
  ``PostgresStore`` pools on one database): decisions from both in threads never overspend a
  budget; a revocation through one is seen by the other's next decision; the shared audit log
  stays contiguous and verifies; closing one leaves the other working, and a Gate opened on the
  path after a close continues its once-only record, budget reservations and log; Gates made at
  the same moment in several threads on a fresh file all take the one log key the first made;
- two ``GatewayGate``s on one store share the nonce table (an invocation used at one is a replay
  at the other), and one with another root refuses the chain its neighbour verified and kept;
- the approval gate a Gate sets for the call it decides (``_pending_approval``) is seen by no other
  Gate deciding in another thread or event-loop task at the same time (a regression guard: the
  variable is set and reset around engine code that calls nothing of the caller's, so no
  interleaving inside one thread exists to be tested);
- a call that a tool running under Gate A makes through Gate B waits for B's own slot: it borrows
  nothing from A's limits (``RUNNING``);
- a file changed at the same path is read again by ``load_policy`` (nothing is cached by path).

Found and fixed here:

- an allowed ``Authorization`` kept by the caller (a log of recent decisions, a result held
  after ``run``) kept its Gate alive after ``Gate.close()``, with everything the Gate holds (its
  chain cache of up to 4096 chains, policy index, scheduler state, the keys of its delegations):
  the seal that ``Gate.run`` compares named the Gate strongly. ``Gate._seal`` (gate/_gate.py)
  now names the deciding Gate by a ``weakref.ref``.

Seen and left as designed (no test): ``Gate.close`` closes the ``Store`` it was given, so Gates
sharing one ``Store`` object fail closed (``StoreError``, nothing runs) once one of them closes;
policy quota counts are keyed by quota name and subject in the store and Prometheus metrics are
summed per registry, so teams that share one store (``Gate.open`` without a URL uses
``AGENTGATE_STORE`` or ``.agentgate/agentgate.db`` for every policy) or one registry share those;
``GatewayGate`` decides with the engine's approval hook reading ``_pending_approval`` without
setting it (its ambient value, ``None`` outside ``Gate.authorize``).

Found, fixed in the fix round (were strict xfails, in files this review did not own):

- ``policy_hash`` was the digest of the policy file's bytes only: two policies with the same text
  whose key files (``key: keys/root.pub``) hold different keys, two teams' copies in two
  directories or one file whose key file was replaced, record the same ``policy_hash`` while
  trusting different roots and principals (fix in agentgate/policy/_load.py);
- ``_DELEGATION_TOOLS`` marked a delegation tool process-wide, not per Gate: a delegation tool made
  for Gate A, given to an agent gated by Gate B, runs the sub-agent under A's delegation rule while
  B's policy is never asked and B's log records nothing (fix in agentgate/integrations/langgraph/).
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
import weakref
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from test_gate_policy_change import KEYS, LOOKUP, MODEL, REFUND, policy_text
from test_leaks_long_life import World

from agentgate.authority import Authority, Invocation, decide, delegate, issue
from agentgate.capabilities import Call
from agentgate.dispatch.gateway import GatewayGate
from agentgate.errors import Denied
from agentgate.gate import AgentIdentity, Approval, Gate
from agentgate.policy import load_policy, parse_policy
from agentgate.store import SQLiteStore
from agentgate.store.grants import GrantRepository


def _gate(path: Path, cls: type[Gate] = Gate, **changes: object) -> Gate:
    """A Gate on the SQLite file ``path`` with the review r37 policy, changed by ``changes``."""
    return cls(parse_policy(policy_text(**changes), source="r39.yaml"), SQLiteStore(path))


def _agent(gate: Gate) -> AgentIdentity:
    return gate.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="worker")


@pytest.fixture
def gates() -> Iterator[list[Gate]]:
    """Gates the test opens; closed at its end."""
    made: list[Gate] = []
    yield made
    for gate in made:
        gate.close()


# --- trust roots and the chain caches ---------------------------------------------------------


def test_a_chain_verified_under_one_root_is_refused_by_a_gate_with_another(
    tmp_path: Path, gates: list[Gate]
) -> None:
    a = _gate(tmp_path / "a.db")
    b = _gate(tmp_path / "b.db", anchor=KEYS["root2"].did)
    gates += [a, b]
    agent = _agent(a)
    assert a.authorize(agent, LOOKUP).allowed  # verified, and now in a's chain cache
    refused = b.authorize(agent, LOOKUP)
    assert refused.verdict == "deny" and [f.code for f in refused.findings] == ["untrusted_root"]
    assert a.authorize(agent, LOOKUP).allowed  # b's refusal did not reach a's cache either
    # A Gate on a third store with a's root decides the same chain from scratch: allowed.
    c = _gate(tmp_path / "c.db")
    gates.append(c)
    assert c.authorize(agent, LOOKUP).allowed


def test_the_process_wide_cache_of_decide_keys_on_the_anchors_and_caches_no_time_or_revocation(
    tmp_path: Path,
) -> None:
    """``decide`` without a cache uses one cache for the whole process: what it keeps must be
    valid under any repository and clock, and only under the anchors it was verified for."""
    now = time.time()
    agent, sub = KEYS["agent"], KEYS["sub"]
    root = issue(KEYS["root"], agent.public, ["tool:lookup"], ttl=600, now=now)
    chain = delegate(root, agent, sub.public, ["tool:lookup"], ttl=60, now=now)
    stores = [SQLiteStore(tmp_path / f"{n}.db") for n in ("one", "two")]
    one, two = (GrantRepository(s) for s in stores)
    try:

        def decided(repo: GrantRepository, trusted: Any, at: float = now) -> tuple[str, list[str]]:
            inv = Invocation.sign(sub, chain, LOOKUP, now=at)
            d = decide(inv, repo=repo, trusted=trusted, now=at)
            return d.outcome.value, [f.code for f in d.findings]

        assert decided(one, KEYS["root"].public) == ("allow", [])  # verified and cached
        assert decided(one, KEYS["root2"].public) == ("deny", ["untrusted_root"])
        assert decided(one, [KEYS["root2"].did]) == ("deny", ["untrusted_root"])
        assert decided(one, [KEYS["root"].did, KEYS["root2"].did]) == ("allow", [])
        one.revoke(root.id, now=int(now))
        assert decided(one, KEYS["root"].public) == ("deny", ["revoked"])
        assert decided(two, KEYS["root"].public) == ("allow", [])  # never revoked there
        assert decided(two, KEYS["root"].public, now + 120) == ("deny", ["grant_expired"])
        # Two engines, one store: each with its own anchors and cache.
        trusting = Authority(two, KEYS["root"].public)
        other = Authority(two, KEYS["root2"].public)
        inv = Invocation.sign(sub, chain, LOOKUP, now=now)
        assert trusting.decide(inv, now=now).allowed
        assert [f.code for f in other.decide(inv, now=now).findings] == ["untrusted_root"]
    finally:
        one.close()
        two.close()
        for s in stores:
            s.close()


def test_revocation_lives_in_its_store_and_is_never_cached(tmp_path: Path, gates: list[Gate]) -> None:
    a = _gate(tmp_path / "a.db")
    b = _gate(tmp_path / "b.db")
    gates += [a, b]
    agent = _agent(a)
    assert a.authorize(agent, LOOKUP).allowed and b.authorize(agent, LOOKUP).allowed  # both cached
    a.revoke(agent)
    assert [f.code for f in a.authorize(agent, LOOKUP).findings] == ["revoked"]
    assert b.authorize(agent, LOOKUP).allowed  # b's store never heard of it
    b.revoke(agent.chain.root.id)
    assert [f.code for f in b.authorize(agent, LOOKUP).findings] == ["revoked"]


def test_an_approval_or_an_allow_of_one_gate_is_nothing_at_another(tmp_path: Path, gates: list[Gate]) -> None:
    a = _gate(tmp_path / "a.db")
    b = _gate(tmp_path / "b.db")
    gates += [a, b]
    agent = _agent(a)
    asked = a.authorize(agent, REFUND, call_id="c1")
    assert asked.needs_approval and asked.request is not None
    approval = Approval.sign(asked.request, KEYS["alice"])
    assert b.authorize(agent, REFUND, call_id="c1").needs_approval
    at_b = b.authorize(agent, REFUND, call_id="c1", approval=approval)
    assert at_b.verdict == "deny" and "no approval request" in " ".join(at_b.reasons)
    allowed = a.authorize(agent, REFUND, call_id="c1", approval=approval)
    assert allowed.allowed
    ran: list[str] = []
    with pytest.raises(Denied, match="not decided by this Gate"):
        b.run(allowed, lambda: ran.append("b"))
    assert a.run(allowed, lambda: ran.append("a")) is None and ran == ["a"]


# --- two Gates on one SQLite file -------------------------------------------------------------


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def two_stores(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Two store objects on one database: a SQLite file, or a PostgreSQL database."""
    if request.param == "sqlite":
        return lambda: SQLiteStore(tmp_path / "shared.db")
    from agentgate.store._postgres import PostgresStore

    url = request.getfixturevalue("postgres_url")
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "log.key"))
    return lambda: PostgresStore(url)


def test_two_gates_on_one_database_in_threads_share_the_budget_log_and_revocations(
    two_stores: Any, gates: list[Gate]
) -> None:
    policy = parse_policy(policy_text(), source="r39.yaml")
    a, b = Gate(policy, two_stores()), Gate(policy, two_stores())
    gates += [a, b]
    agent = _agent(a)
    # The worker's budget is 10,000 usd_micros; each model call reserves 1,000 (500 + 500 tokens).
    start = threading.Barrier(8)
    verdicts: list[str] = []
    lock = threading.Lock()

    def spend(gate: Gate) -> None:
        start.wait()
        for _ in range(3):
            auth = gate.authorize(agent, MODEL, tokens=(500, 500))
            with lock:
                verdicts.append(auth.verdict)

    threads = [threading.Thread(target=spend, args=(g,)) for g in (a, b) * 4]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert verdicts.count("allow") == 10 and len(verdicts) == 24
    for gate in (a, b):
        assert gate.budget_usage(agent)[agent.grant_id] == (0, 10_000)
    # One log written by both: contiguous, each entry once, and it verifies.
    a.flush()
    b.flush()
    indexes = [e.index for e in a.audit.entries()]
    assert indexes == list(range(len(indexes))) and len(indexes) >= 25
    assert a.verify().ok and b.verify().ok
    # A revocation through one is the other's next answer.
    assert b.authorize(agent, LOOKUP).allowed
    a.revoke(agent)
    assert [f.code for f in b.authorize(agent, LOOKUP).findings] == ["revoked"]


def test_gates_made_at_once_on_a_fresh_file_sign_with_one_log_key(tmp_path: Path) -> None:
    """The log key beside a new SQLite file is made by the first Gate; the others, made at the
    same moment in other threads of the process, must take that key, not one of their own."""
    policy = parse_policy(policy_text(), source="r39.yaml")
    made: list[Gate] = []
    errors: list[BaseException] = []
    start = threading.Barrier(6)
    lock = threading.Lock()

    def make() -> None:
        start.wait()
        try:
            gate = Gate(policy, SQLiteStore(tmp_path / "fresh.db"))
        except BaseException as exc:  # recorded for the assertion below
            errors.append(exc)
            return
        with lock:
            made.append(gate)

    threads = [threading.Thread(target=make) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert errors == [] and len(made) == 6
        assert len({gate.audit.public_key.did for gate in made}) == 1
        agent = _agent(made[0])
        for gate in made:
            assert gate.authorize(agent, LOOKUP).allowed
            gate.flush()
            gate.audit.checkpoint()
        assert all(gate.verify().ok for gate in made)
    finally:
        for gate in made:
            gate.close()


def test_a_gate_closed_leaves_its_neighbour_working_and_a_new_one_continues_its_state(
    tmp_path: Path, gates: list[Gate]
) -> None:
    path = tmp_path / "shared.db"
    a, b = _gate(path), _gate(path)
    gates.append(b)
    agent = _agent(a)
    small = Call.tool("refund", {"amount": 50})
    first = a.authorize(agent, small, call_id="once-1")
    assert a.run(first, lambda: "paid") == "paid"
    assert a.authorize(agent, MODEL, tokens=(2000, 2000)).allowed  # 4,000 reserved, never settled
    a.close()
    assert b.authorize(agent, LOOKUP).allowed
    c = _gate(path)  # after a's close, on the same path: the same store, not a fresh one
    gates.append(c)
    again = c.authorize(agent, small, call_id="once-1")
    assert again.verdict == "deny"  # it ran through a: never twice
    # a's 4,000 are still reserved: 6,000 of the 10,000 are left, not 10,000.
    too_much = c.authorize(agent, MODEL, tokens=(3001, 3000))
    assert too_much.verdict == "deny" and too_much.budget_exhausted
    assert c.authorize(agent, MODEL, tokens=(3000, 3000)).allowed
    c.flush()
    b.flush()
    assert c.verify().ok
    assert [e.index for e in c.audit.entries()] == list(range(c.audit.size()))


# --- gateways ---------------------------------------------------------------------------------


def _invocation(identity: AgentIdentity, call: Call) -> str:
    return Invocation.sign(KEYS[identity.name], identity.chain, call).encode()


def test_two_gateways_share_one_stores_nonces_and_keep_no_chain_across_roots(
    tmp_path: Path, gates: list[Gate]
) -> None:
    path = tmp_path / "shared.db"
    one = _gate(path, GatewayGate)
    two = _gate(path, GatewayGate)
    other_root = _gate(tmp_path / "other.db", GatewayGate, anchor=KEYS["root2"].did)
    gates += [one, two, other_root]
    assert isinstance(one, GatewayGate) and isinstance(two, GatewayGate)
    assert isinstance(other_root, GatewayGate)
    agent = _agent(one)
    token = agent.chain.token
    used = _invocation(agent, MODEL)
    assert one.authorize_invocation(token, used, MODEL, (1, 1)).allowed  # its chain kept by `one`
    replayed = two.authorize_invocation(token, used, MODEL, (1, 1))
    assert (replayed.status, replayed.code) == (401, "replayed_invocation")
    fresh = two.authorize_invocation(token, _invocation(agent, MODEL), MODEL, (1, 1))
    assert fresh.allowed
    foreign = other_root.authorize_invocation(token, _invocation(agent, MODEL), MODEL, (1, 1))
    assert (foreign.status, foreign.code) == (401, "untrusted_root")


# --- context variables --------------------------------------------------------------------------


def test_the_approval_gate_of_one_gates_decision_is_seen_by_no_other_gate(
    tmp_path: Path, gates: list[Gate]
) -> None:
    """``_pending_approval`` is set by each decision for the authority engine's hook: Gate A's
    refunds of 500 need an approval, Gate B's of 50 do not; decided at once in many threads, and
    in tasks of one event loop, each keeps its own answer."""
    a = _gate(tmp_path / "a.db")
    b = _gate(tmp_path / "b.db")
    gates += [a, b]
    agent_a, agent_b = _agent(a), _agent(b)
    small = Call.tool("refund", {"amount": 50})
    start = threading.Barrier(6)
    seen: dict[str, set[str]] = {"a": set(), "b": set()}
    lock = threading.Lock()

    def decide_many(which: str) -> None:
        gate, agent, call = (a, agent_a, REFUND) if which == "a" else (b, agent_b, small)
        start.wait()
        for i in range(15):
            verdict = gate.authorize(agent, call, call_id=f"{which}-{threading.get_ident()}-{i}").verdict
            with lock:
                seen[which].add(verdict)

    threads = [threading.Thread(target=decide_many, args=(w,)) for w in "ababab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"a": {"approval_required"}, "b": {"allow"}}

    async def in_tasks() -> list[str]:
        async def one(gate: Gate, agent: AgentIdentity, call: Call, i: int) -> str:
            return (await gate.to_thread(gate.authorize, agent, call, call_id=f"t{i}")).verdict

        return list(
            await asyncio.gather(
                *(one(a, agent_a, REFUND, i) if i % 2 else one(b, agent_b, small, i) for i in range(10))
            )
        )

    verdicts = asyncio.run(in_tasks())
    assert verdicts == ["allow", "approval_required"] * 5


def _queued(gate: Gate) -> float:
    """Calls waiting for a slot in ``gate``'s schedulers (its own registry)."""
    total = 0.0
    for metric in gate.registry.collect():
        if metric.name == "agentgate_tasks_queue_depth":
            total += sum(s.value for s in metric.samples)
    return total


def test_a_call_into_another_gate_from_a_running_tool_borrows_none_of_its_slots(tmp_path: Path) -> None:
    """``refund`` has a concurrency of 1 in both gates. While B's one slot is held, a refund that a
    tool running under A makes through B must wait for B's slot (the nested-call rule lends only
    slots of the limits the ancestor itself runs under, ``RUNNING``), not borrow A's."""
    world_a, world_b = World(), World()
    a = world_a.gate(SQLiteStore(tmp_path / "a.db"))
    b = world_b.gate(SQLiteStore(tmp_path / "b.db"))
    try:
        agent_a, agent_b = world_a.agent(a), world_b.agent(b)
        refund = Call.tool("refund", {"amount": 1})
        release = threading.Event()
        order: list[str] = []

        def holder() -> None:
            b.run(
                b.authorize(agent_b, refund, call_id="holder"),
                lambda: release.wait(10) and order.append("holder"),
            )

        def nested() -> str:
            inner = b.authorize(agent_b, refund, call_id="nested")
            return b.run(inner, lambda: order.append("nested") or "nested ran")

        outer_result: list[str] = []

        def outer() -> None:
            outer_result.append(a.run(a.authorize(agent_a, refund, call_id="outer"), nested))

        held = threading.Thread(target=holder)
        held.start()
        deadline = time.monotonic() + 10
        while not _in_flight(b) and time.monotonic() < deadline:
            time.sleep(0.01)
        runner = threading.Thread(target=outer)
        runner.start()
        deadline = time.monotonic() + 10
        while _queued(b) < 1 and not order and time.monotonic() < deadline:
            time.sleep(0.01)
        assert order == [], "the nested call ran while B's only refund slot was held"
        assert _queued(b) == 1
        release.set()
        held.join(10)
        runner.join(10)
        assert order == ["holder", "nested"] and outer_result == ["nested ran"]
    finally:
        release.set()
        a.close()
        b.close()


def _in_flight(gate: Gate) -> bool:
    for metric in gate.registry.collect():
        if metric.name == "agentgate_tasks_in_flight":
            return any(s.value for s in metric.samples)
    return False


# --- memory after close ---------------------------------------------------------------------------


def test_an_allow_kept_after_close_does_not_keep_its_gate_alive(tmp_path: Path) -> None:
    gate = _gate(tmp_path / "a.db")
    agent = _agent(gate)
    kept_run = gate.authorize(agent, LOOKUP)
    gate.run(kept_run, lambda: 1)
    kept_unused = gate.authorize(agent, LOOKUP)
    kept_refusal = gate.authorize(None, LOOKUP)
    cache = weakref.ref(gate.authority.cache)
    ref = weakref.ref(gate)
    gate.close()
    del gate
    gc.collect()
    assert ref() is None and cache() is None, "a closed Gate is kept alive by an Authorization it decided"
    # What the caller kept still reads, and is still no allow anywhere else.
    assert kept_run.allowed and kept_unused.allowed and not kept_refusal.allowed
    other = _gate(tmp_path / "a.db")
    try:
        with pytest.raises(Denied, match="not decided by this Gate"):
            other.run(kept_unused, lambda: 1)
    finally:
        other.close()


def test_the_seal_still_refuses_a_second_run_and_a_changed_allow(tmp_path: Path) -> None:
    """The seal held weakly is still the seal: the deciding Gate alive, a run uses the allow up and
    a copy with another call is refused."""
    import dataclasses

    gate = _gate(tmp_path / "a.db")
    try:
        agent = _agent(gate)
        auth = gate.authorize(agent, LOOKUP)
        changed = dataclasses.replace(auth, call=Call.tool("lookup", {"id": "2"}))
        with pytest.raises(Denied, match="not decided by this Gate"):
            gate.run(changed, lambda: 1)
        assert gate.run(auth, lambda: 7) == 7
        with pytest.raises(Denied, match="already used"):
            gate.run(auth, lambda: 8)
    finally:
        gate.close()


# --- policies by path -----------------------------------------------------------------------------


def _policy_with_key_files(directory: Path, root: str) -> Path:
    """The review r37 policy, its trust anchor named by a key file beside it."""
    (directory / "keys").mkdir(parents=True)
    (directory / "keys" / "root.pub").write_text(KEYS[root].did + "\n")
    text = policy_text().replace(f'root: {{did: "{KEYS["root"].did}"}}', "root: {key: keys/root.pub}")
    assert "keys/root.pub" in text
    path = directory / "policy.yaml"
    path.write_text(text)
    return path


def test_a_policy_file_changed_at_its_path_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(policy_text())
    first = load_policy(path)
    path.write_text(policy_text(anchor=KEYS["root2"].did))
    second = load_policy(path)
    assert first.anchor_dids["root"] == KEYS["root"].did and second.anchor_dids["root"] == KEYS["root2"].did
    assert first.digest != second.digest


def test_equal_policy_text_with_other_key_files_records_another_policy_hash(tmp_path: Path) -> None:
    team_a = load_policy(_policy_with_key_files(tmp_path / "a", "root"))
    team_b = load_policy(_policy_with_key_files(tmp_path / "b", "root2"))
    assert team_a.anchor_dids != team_b.anchor_dids  # they trust different roots...
    assert team_a.digest != team_b.digest  # ...so the audit log must tell their decisions apart


# --- LangGraph: the process-wide mark of delegation tools -------------------------------------


def _teams(tmp_path: Path) -> tuple[Gate, Gate, dict[str, Any]]:
    """Gates A and B of two teams with the same people and root (test_langgraph's policy); B's
    supervisor may hand on ``tool:publish`` only, A's also ``tool:search``."""
    from test_langgraph import _policy_text

    from agentgate.keys import SigningKey

    keys = {n: SigningKey.generate() for n in ("root", "supervisor", "researcher", "dana")}
    text_a = _policy_text({n: k.did for n, k in keys.items()}, 1_000_000)
    delegable_search = "      capabilities:\n        - resource: tool:search\n"
    assert text_a.count(delegable_search) == 1
    text_b = text_a.replace(delegable_search, "      capabilities:\n")
    gate_a = Gate(parse_policy(text_a, source="a.yaml"), SQLiteStore(tmp_path / "a.db"))
    gate_b = Gate(parse_policy(text_b, source="b.yaml"), SQLiteStore(tmp_path / "b.db"))
    return gate_a, gate_b, keys


def _supervisor_of_b_asks(
    tool_gate: Gate, gate_b: Gate, keys: dict[str, Any]
) -> tuple[list[str], Any, list[Any]]:
    """B's supervisor calls ``ask_researcher``, a delegation tool made with ``tool_gate`` whose
    researcher (gated by ``tool_gate``) searches: what the researcher ran, the tool message, B's
    log."""
    from langchain_core.tools import StructuredTool
    from test_langgraph import _calls, _tool_messages

    from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent, delegation_tool

    ran: list[str] = []

    def search(query: str) -> str:
        ran.append(query)
        return "found"

    researcher = create_gated_agent(
        tool_gate,
        name="researcher",
        model=ScriptedChatModel(turns=[_calls(("search", {"query": "papers"}))]),
        tools=[StructuredTool.from_function(func=search, name="search", description="search")],
    )
    ask = delegation_tool(
        tool_gate,
        name="researcher",
        agent=researcher,
        key=keys["researcher"],
        capabilities=["tool:search", "model:scripted"],
        ttl=timedelta(minutes=5),
    )
    supervisor = gate_b.issue(keys["root"], name="supervisor", key=keys["supervisor"], role="supervisor")
    model = ScriptedChatModel(turns=[_calls(("ask_researcher", {"task": "find papers"}))])
    agent = create_gated_agent(gate_b, name="supervisor", model=model, tools=[ask])
    result = agent.invoke({"messages": [{"role": "user", "content": "go"}]}, context=supervisor)
    (message,) = _tool_messages(result)
    gate_b.flush()
    return ran, message, list(gate_b.audit.entries())


def test_a_delegation_that_the_callers_gate_refuses_does_not_run(tmp_path: Path) -> None:
    """The control of the next test: B's own delegation tool is refused by B's delegation rule."""
    gate_a, gate_b, keys = _teams(tmp_path)
    try:
        ran, message, entries = _supervisor_of_b_asks(gate_b, gate_b, keys)
        assert ran == [] and message.status == "error"
        assert ("deny", "agent:researcher") in [(e.kind, e.resource) for e in entries]
    finally:
        gate_a.close()
        gate_b.close()


def test_a_delegation_tool_of_one_gate_is_decided_by_the_gate_of_the_agent_that_calls_it(
    tmp_path: Path,
) -> None:
    gate_a, gate_b, keys = _teams(tmp_path)
    try:
        ran, message, entries = _supervisor_of_b_asks(gate_a, gate_b, keys)
        assert ran == [] and message.status == "error", "B's supervisor delegated under A's policy"
        assert any(e.kind == "deny" and "researcher" in (e.resource or "") for e in entries)
    finally:
        gate_a.close()
        gate_b.close()
