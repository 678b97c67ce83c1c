"""Review r38, a second look at what this session changed (1a50ce7..HEAD): each change attacked
with real SQLite files, a real PostgreSQL server and the real CLI.

Defects found, and what became of them:

- ``open_store(pathlib.Path(...))`` (and bytes) ended in a bare ``TypeError``; fixed by the lead
  (a path object is opened, bytes refused with ``StoreError``).
- After ``agentgate store prune`` removed an expired request (with its ``approval_asked`` row),
  the refusal of an approval presented for it has ``ref`` null, where one for a request that has
  only expired refers to its ``approval_required`` entry. Kept, and documented
  (docs/operations.md, Growth and pruning): the row that links the request to its entry is what
  prune removes; the refusal names the request id instead
  (``test_the_refusal_of_an_approval_for_a_pruned_request_names_its_request``).
- An allow whose ``call.args`` dict is changed in place after the decision still matches its
  seal and runs. Not changed, documented (docs/langgraph.md, step 4): the seal binds the decision
  record (verdict, call, identity, audit entry, reservations), not what the function handed to
  ``Gate.run`` does; that function is the caller's own code, which can call anything with any
  arguments, so re-checking the arguments on every run would protect nothing. The test was
  dropped.

What holds:

- The seal: ``copy.copy`` of an allow shares its one use (the copy runs, the original is then
  refused); ``copy.deepcopy`` and ``pickle`` cannot copy one (TypeError: the lock); a frozen
  field replaced with ``object.__setattr__`` (another call), a deny rebuilt as an allow by a
  subclass that borrows an allow's use token, and ``dataclasses.replace`` with another call are
  refused; an allow runs from another thread and from another event loop (``arun``).
- Two approvers voting at the same moment on PostgreSQL under ``QuorumRule`` (the second blocked
  on the row lock while the first commits): the request ends ``approved`` with both votes, and
  the Gate then allows the call once.
- ``agentgate store prune`` after an approval request expired: the approval presented for it
  afterwards is a recorded refusal (``approval not usable``), the log verifies, ``audit explain``
  of the request's entry still works, and the call asked again opens a new request. A
  reservation held by a decided, not yet run allow survives a prune and is settled by its run.
- ``open_store`` / ``open_existing_store``: a relative path, ``sqlite:///rel``, ``sqlite:////abs``,
  a file named ``file.db``, ``file.db:x``, ``postgresql_backup.db``, ``sqlite3:z.db``,
  ``C:/c.db`` and ``C:\\d.db`` on Linux, an absolute path through a directory named
  ``postgres:x``; ``postgresql://`` with a query string. (A *relative* path whose first directory
  is named ``postgres:x``/``sqlite:x``/``file:x`` is refused as a URL without ``//``, as
  documented; ``./postgres:x/a.db`` opens it.)
- The entry-point type checks accept pathlib and ``os.PathLike`` policies, a str subclass as a
  name, tuples and generators of capabilities and trust anchors, ``MappingProxyType`` arguments,
  a bytes seed; numpy, Fraction and bool numbers are refused with a typed error naming them.
- The undeclared-name redaction: a crafted name equal to the tool's resource, to a declared
  name's quoted form, or whose quoted form holds another undeclared name's, never leaves the
  name (or part of it) in clear and rewrites nothing else of the reason.
- ``BudgetLedger.commit`` of 10**30 on PostgreSQL returns the shortfall beyond what a column
  holds, and through a Gate on PostgreSQL ``budget_delta - N`` is what the budget was charged.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import pickle
import threading
import time
import types
from collections.abc import Iterator
from datetime import timedelta
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
from test_gate_policy_change import KEYS, LOOKUP, MODEL, REFUND, policy_text

from agentgate.capabilities import Call
from agentgate.cli._common import open_existing_store
from agentgate.cli.main import main
from agentgate.errors import AgentGateError, Denied, InputError
from agentgate.gate import AgentIdentity, Approval, Authorization, Gate
from agentgate.keys import SigningKey
from agentgate.policy import load_policy, parse_policy
from agentgate.store import SQLiteStore, Store, open_store
from agentgate.store.approvals import ApprovalStore, QuorumRule
from agentgate.store.ledger import MAX_AMOUNT, BudgetLedger


def _gate(store: Store, **changes: object) -> Gate:
    return Gate(parse_policy(policy_text(**changes), source="p.yaml"), store)


@pytest.fixture
def gate(tmp_path: Path) -> Iterator[Gate]:
    made = _gate(SQLiteStore(tmp_path / "ag.db"))
    yield made
    made.close()


def _agent(gate: Gate) -> AgentIdentity:
    return gate.issue(KEYS["root"], name="agent", key=KEYS["agent"], role="worker")


# --- the allow seal ---------------------------------------------------------------------------


def test_an_allow_cannot_be_run_twice_through_a_copy_nor_copied_deeply(gate: Gate) -> None:
    agent = _agent(gate)
    auth = gate.authorize(agent, LOOKUP, call_id="c1")
    assert gate.run(copy.copy(auth), lambda: "copy") == "copy"
    with pytest.raises(Denied, match="already used"):
        gate.run(auth, lambda: "original")
    fresh = gate.authorize(agent, LOOKUP, call_id="c2")
    for duplicate in (copy.deepcopy, lambda a: pickle.loads(pickle.dumps(a))):
        with pytest.raises(TypeError):
            duplicate(fresh)
    assert gate.run(fresh, lambda: "ran") == "ran"  # the failed copies used nothing


def test_an_allow_changed_by_hand_is_refused(gate: Gate) -> None:
    agent = _agent(gate)
    ran: list[str] = []
    auth = gate.authorize(agent, Call.tool("refund", {"amount": 50}), call_id="c1")
    object.__setattr__(auth, "call", Call.tool("refund", {"amount": 1_000_000}))
    with pytest.raises(Denied, match="not decided by this Gate"):
        gate.run(auth, lambda: ran.append("setattr"))
    other = gate.authorize(agent, Call.tool("refund", {"amount": 60}), call_id="c2")
    with pytest.raises(Denied, match="not decided by this Gate"):
        gate.run(
            dataclasses.replace(other, call=Call.tool("refund", {"amount": 900})), lambda: ran.append("x")
        )
    refused = gate.authorize(agent, Call.tool("refund", {"amount": 5000}), call_id="c3")
    assert not refused.allowed
    donor = gate.authorize(agent, LOOKUP, call_id="c4")

    class Forged(Authorization):
        pass

    fields = {f.name: getattr(refused, f.name) for f in dataclasses.fields(refused) if f.name != "_use"}
    forged = Forged(**{**fields, "verdict": "allow", "audit_index": donor.audit_index}, _use=donor._use)
    with pytest.raises(Denied, match="not decided by this Gate"):
        gate.run(forged, lambda: ran.append("forged"))
    assert ran == []
    assert gate.run(donor, lambda: "donor") == "donor"  # its own use was not taken by the forgery


def test_an_allow_runs_from_another_thread_and_another_event_loop(gate: Gate) -> None:
    agent = _agent(gate)
    auth = gate.authorize(agent, LOOKUP, call_id="c1")
    out: list[object] = []
    worker = threading.Thread(target=lambda: out.append(gate.run(auth, lambda: "thread")))
    worker.start()
    worker.join()
    assert out == ["thread"]
    later = gate.authorize(agent, LOOKUP, call_id="c2")

    async def run() -> str:
        async def call() -> str:
            return "loop"

        return await gate.arun(later, call)

    assert asyncio.run(run()) == "loop"
    gate.flush()
    statuses = [e.status for e in gate.audit.entries() if e.kind == "outcome"]
    assert statuses == ["ok", "ok"]


# --- approvals counted against the rule in force, on PostgreSQL -------------------------------


def _wait_until_blocked(store: Store, what: str) -> None:
    """Until a backend of this database waits on a lock (``what``: for the failure message)."""
    for _ in range(2000):
        rows = store.query(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database()"
        )
        if rows[0][0]:
            return
        time.sleep(0.005)
    raise AssertionError(f"{what} never waited on the lock")


@pytest.mark.postgres
@pytest.mark.parametrize("quorum", [1, 2])
def test_two_approvers_voting_at_once_on_postgresql_approve_the_request(
    postgres_url: str, quorum: int
) -> None:
    from agentgate.store._postgres import PostgresStore

    rule = QuorumRule(quorum, frozenset({"did:alice", "did:bob"}))
    with PostgresStore(postgres_url) as one, PostgresStore(postgres_url) as two:
        first, second = ApprovalStore(one), ApprovalStore(two)
        asked = first.request("call-1", "did:agent", time.time() + 600, quorum=1)
        errors: list[BaseException] = []

        def vote() -> None:
            try:
                second.approve(asked, "did:bob", call_hash="call-1", rule=rule)
            except BaseException as exc:  # pragma: no cover - shown by the assertion below
                errors.append(exc)

        with one.transaction() as tx:
            first.approve(asked, "did:alice", call_hash="call-1", tx=tx, rule=rule)
            voter = threading.Thread(target=vote)
            voter.start()
            _wait_until_blocked(one, "bob's vote")
        voter.join()
        assert errors == []
        record = first.get(asked)
        assert (record.state, record.quorum) == ("approved", quorum)
        assert first.approvers(asked, rule=rule) == ("did:alice", "did:bob")
        assert first.consume(asked, "call-1", rule=rule) == ("did:alice", "did:bob")


@pytest.mark.postgres
def test_a_gate_on_postgresql_allows_once_after_two_approvers_answer_from_two_processes(
    postgres_url: str,
) -> None:
    from agentgate.store._postgres import PostgresStore

    first = _gate(PostgresStore(postgres_url), quorum=2)
    second = _gate(PostgresStore(postgres_url), quorum=2)
    try:
        agent = _agent(first)
        asked = first.authorize(agent, REFUND, call_id="c1")
        assert asked.needs_approval and asked.request is not None
        by_alice = Approval.sign(asked.request, KEYS["alice"])
        by_bob = Approval.sign(asked.request, KEYS["bob"])
        answers: dict[str, Authorization] = {}
        barrier = threading.Barrier(2)

        def answer(gate: Gate, who: str, approval: Approval) -> None:
            barrier.wait()
            answers[who] = gate.authorize(agent, REFUND, call_id="c1", approval=approval)

        voters = [
            threading.Thread(target=answer, args=(first, "alice", by_alice)),
            threading.Thread(target=answer, args=(second, "bob", by_bob)),
        ]
        for voter in voters:
            voter.start()
        for voter in voters:
            voter.join()
        allowed = [who for who, auth in answers.items() if auth.allowed]
        if not allowed:  # both counted before either saw the other's vote: the next answer completes
            answers["again"] = first.authorize(agent, REFUND, call_id="c1", approval=by_alice)
            allowed = [who for who, auth in answers.items() if auth.allowed]
        assert len(allowed) == 1
        auth = answers[allowed[0]]
        assert sorted((auth.approver or "").split(",")) == sorted([KEYS["alice"].did, KEYS["bob"].did])
        owner = first if allowed[0] != "bob" else second
        assert owner.run(auth, lambda: "refunded") == "refunded"
        again = first.authorize(agent, REFUND, call_id="c1", approval=by_bob)
        assert not again.allowed
        first.flush()
        second.flush()
        assert list(first.audit.verify().problems) == []
    finally:
        first.close()
        second.close()


# --- agentgate store prune while a Gate works --------------------------------------------------


def _prune_scenario(
    gate: Gate, url: str, capsys: pytest.CaptureFixture[str]
) -> tuple[AgentIdentity, Authorization, Authorization]:
    """An agent's refund asked for approval, the request expired two hours ago and pruned by
    ``agentgate store prune`` while a model call decided (not yet run) holds its reservation;
    then the approval given for the pruned request presented: (agent, asked, late answer)."""
    agent = _agent(gate)
    asked = gate.authorize(agent, REFUND, call_id="c1")
    assert asked.needs_approval and asked.request is not None and asked.audit_index is not None
    held = gate.authorize(agent, MODEL, tokens=(10, 5))  # decided, not run: its reservation held
    assert held.allowed and held.reservations
    with gate.store.transaction() as tx:  # the request expired two hours ago
        tx.execute("UPDATE approvals SET expires_at = ?", (time.time() - 7200,))
    assert main(["store", "prune", "--older-than", "1h", "--store", url, "--json"]) == 0
    assert '"approval_requests": 1, "settled_reservations": 0' in capsys.readouterr().out
    late = gate.authorize(agent, REFUND, call_id="c1", approval=Approval.sign(asked.request, KEYS["alice"]))
    assert gate.run(held, lambda: "text", spent=lambda _: (10, 2)) == "text"
    gate.flush()
    assert BudgetLedger(gate.store).remaining(agent.grant_id) == 10_000 - 12
    return agent, asked, late


def test_an_approval_for_a_pruned_request_is_a_recorded_refusal_and_the_log_still_explains(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ag.db"
    gate = _gate(SQLiteStore(path))
    try:
        agent, asked, late = _prune_scenario(gate, str(path), capsys)
        assert late.verdict == "deny" and late.reasons[0].startswith("approval not usable")
        assert list(gate.audit.verify().problems) == []
        anew = gate.authorize(agent, REFUND, call_id="c1")
        assert anew.needs_approval and anew.request is not None
        assert asked.request is not None and anew.request["id"] != asked.request["id"]
    finally:
        gate.close()
    assert main(["audit", "explain", str(asked.audit_index), "--store", str(path)]) == 0
    assert "approval_required" in capsys.readouterr().out


@pytest.mark.postgres
def test_store_prune_on_postgresql_while_a_gate_holds_a_reservation(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentgate.store._postgres import PostgresStore

    gate = _gate(PostgresStore(postgres_url))
    try:
        _, _, late = _prune_scenario(gate, postgres_url, capsys)
        assert late.verdict == "deny"
        assert list(gate.audit.verify().problems) == []
    finally:
        gate.close()


def test_the_refusal_of_an_approval_for_a_pruned_request_names_its_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ag.db"
    gate = _gate(SQLiteStore(path))
    try:
        _, asked, late = _prune_scenario(gate, str(path), capsys)
        assert late.audit_index is not None and asked.request is not None
        # The request is gone with its link to the approval_required entry (docs/operations.md,
        # Growth and pruning): the refusal cannot refer to it, and names the request instead.
        entry = gate.audit.entry(late.audit_index)
        assert entry.ref is None and asked.request["id"] in " ".join(entry.reasons)
    finally:
        gate.close()


# --- open_store and open_existing_store: the forms that must keep working ---------------------

_PATHS = [
    "file.db",
    "file.db:x",
    "postgresql_backup.db",
    "sqlite3:z.db",
    "my-sqlite:y.db",
    "C:/c.db",
    "C:\\d.db",
    "sub/e.db",
    "./postgres:x/b.db",
    "sqlite:///rel.db",
    "SQLITE:///up.db",
]


@pytest.mark.parametrize("name", _PATHS)
def test_every_documented_sqlite_form_opens_the_file_it_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "postgres:x").mkdir()
    (tmp_path / "C:").mkdir()
    with open_store(name) as store:
        assert isinstance(store, SQLiteStore)
        ApprovalStore(store)
    expected = name.split("///", 1)[1] if "///" in name else name
    assert (tmp_path / expected).is_file()
    with open_existing_store(name) as store:  # and a reading command finds it
        assert store.query("SELECT count(*) FROM approvals")[0][0] == 0


def test_absolute_sqlite_forms_through_a_directory_named_like_a_scheme(tmp_path: Path) -> None:
    odd = tmp_path / "postgres:x"
    odd.mkdir()
    for name in (str(odd / "a.db"), f"sqlite:///{odd / 'b.db'}", f"sqlite:///{tmp_path}/c.db"):
        with open_store(name) as store:
            assert isinstance(store, SQLiteStore)
        with open_existing_store(name):
            pass
    assert sorted(p.name for p in odd.iterdir()) == ["a.db", "b.db"] and (tmp_path / "c.db").is_file()


@pytest.mark.postgres
def test_a_postgresql_url_with_a_query_string_opens(postgres_url: str) -> None:
    separator = "&" if "?" in postgres_url else "?"
    url = f"{postgres_url}{separator}application_name=agentgate-review&connect_timeout=5"
    with open_store(url) as store:
        assert store.dialect == "postgresql"
        assert store.query("SELECT current_setting('application_name')")[0][0] == "agentgate-review"


@pytest.mark.parametrize("kind", ["path", "bytes"])
def test_open_store_of_a_path_object_is_opened_or_refused_with_a_typed_error(
    tmp_path: Path, kind: str
) -> None:
    target: Any = tmp_path / "ag.db" if kind == "path" else str(tmp_path / "ag.db").encode()
    with contextlib.suppress(AgentGateError):  # refused, naming the parameter: fine
        open_store(target).close()


# --- the entry-point type checks: legitimate inputs ---------------------------------------------


class _Text(str):
    pass


class _PathLike:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __fspath__(self) -> str:
        return str(self.path)


def test_legitimate_argument_types_are_accepted_at_the_entry_points(tmp_path: Path) -> None:
    (tmp_path / "p.yaml").write_text(policy_text())
    for policy in (tmp_path / "p.yaml", _PathLike(tmp_path / "p.yaml"), _Text(tmp_path / "p.yaml")):
        assert load_policy(policy).digest  # type: ignore[arg-type]
        Gate.open(policy, str(tmp_path / "open.db")).close()  # type: ignore[arg-type]
    assert SigningKey(b"\x01" * 32).did.startswith("did:key:")
    gate = Gate(
        parse_policy(policy_text(), source="p.yaml"),
        SQLiteStore(tmp_path / "ag.db"),
        trust_anchors=(KEYS["root"].did,),
    )
    try:
        agent = gate.issue(KEYS["root"], name=_Text("agent"), key=KEYS["agent"], role=_Text("worker"))
        proxy = types.MappingProxyType({"id": "1"})
        for n, call in enumerate((Call.tool("lookup", proxy), Call("tool:lookup", "invoke", proxy))):
            assert gate.authorize(agent, call, call_id=_Text(f"c{n}")).allowed
        assert Call.tool(_Text("lookup"), proxy).resource == "tool:lookup"
        assert gate.authorize(agent, MODEL, tokens=(5, 10)).allowed
        for caps in (("tool:lookup",), (c for c in ["tool:lookup"])):
            assert gate.delegate(
                agent, name=_Text("sub"), key=KEYS["sub"], capabilities=caps, ttl=timedelta(seconds=30)
            )
        for budget in (True, Fraction(5), 5.0):
            with pytest.raises(InputError, match="budget"):
                gate.delegate(
                    agent,
                    name="sub",
                    key=KEYS["sub"],
                    capabilities=["tool:lookup"],
                    ttl=timedelta(seconds=30),
                    budget=budget,  # type: ignore[arg-type]
                )
        refused = gate.authorize(agent, Call.tool("refund", {"amount": Fraction(50)}))
        assert not refused.allowed and "Fraction" in refused.reasons[0]
    finally:
        gate.close()


# --- the undeclared-name redaction --------------------------------------------------------------

SECRET = "sk-live-0123456789"


@pytest.mark.parametrize(
    "args",
    [
        {"amount": 1, "tool:refund": 1, SECRET: 1},
        {"amount": 1, "'amount'": 1, SECRET: 1},
        {"amount": 1, f"{SECRET}'ab'{SECRET}": 1, "ab": 1},
        {"amount": 1, "ab": 1, f"{SECRET}'ab'{SECRET}": 1},
        {"amount": 1, "role worker rule 2": 1, SECRET: 1},
        {"amount": 1, "": 1, SECRET: 1},
    ],
    ids=["resource", "declared-quoted", "nested-after", "nested-before", "rule-text", "empty"],
)
def test_a_crafted_argument_name_rewrites_only_itself_in_the_recorded_reason(
    gate: Gate, args: dict[str, int]
) -> None:
    agent = _agent(gate)
    refused = gate.authorize(agent, Call.tool("refund", args), call_id="c1")
    assert not refused.allowed
    gate.flush()
    entry = [e for e in gate.audit.entries() if e.resource == "tool:refund"][-1]
    assert entry.kind == "deny"
    assert entry.reasons == ("tool:refund does not declare an argument <an undeclared argument name>",)
    assert SECRET not in repr(list(gate.audit.entries()))


# --- a usage beyond what a column holds, on PostgreSQL ------------------------------------------


@pytest.mark.postgres
def test_a_commit_beyond_a_column_returns_the_whole_shortfall_on_postgresql(postgres_url: str) -> None:
    from agentgate.store._postgres import PostgresStore

    with PostgresStore(postgres_url) as store:
        ledger = BudgetLedger(store)
        with store.transaction() as tx:
            held = ledger.reserve(tx, ["g"], {"g": 1000}, 10)
        short = ledger.commit(held, 10**30, exhaust=True)
        assert short == 10**30 - 1000  # the budget paid its 1000, the rest is the shortfall
        assert ledger.remaining("g") == 0
        with store.transaction() as tx:
            again = ledger.reserve(tx, ["h"], {"h": MAX_AMOUNT}, 1)
        assert ledger.commit(again, MAX_AMOUNT + 5, exhaust=True) == 5


@pytest.mark.postgres
def test_an_outcome_on_postgresql_records_what_an_absurd_usage_was_charged(postgres_url: str) -> None:
    from agentgate.store._postgres import PostgresStore

    gate = _gate(PostgresStore(postgres_url))
    try:
        agent = _agent(gate)
        auth = gate.authorize(agent, MODEL, tokens=(10, 5))
        assert auth.allowed
        gate.run(auth, lambda: "text", spent=lambda _: (10**30, 5))
        gate.flush()
        outcome = [e for e in gate.audit.entries() if e.kind == "outcome"][-1]
        over = [r for r in outcome.reasons if r.startswith("overran the usd_micros budget by ")]
        short = int(over[0].split(" by ")[1].split(";")[0])
        assert outcome.budget_delta - short == 10_000  # what the budget held, spent out
        assert gate.ledger.remaining(agent.grant_id) == 0
        assert list(gate.audit.verify().problems) == []
    finally:
        gate.close()
