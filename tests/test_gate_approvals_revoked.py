"""An approval request whose call stands on a revoked grant is void.

A grant revoked while its call waits for a human's approval left the request pending until it
expired: listed to approvers (``agentgate approval list``), open to votes, and a vote for it was
logged as ``approval_given`` for a call whose authority was already withdrawn. The store now keeps
the grant ids of the call's chain with the request, and a request any of whose grants is revoked
(the call's own or any ancestor: revocation cascades) is no longer open, whoever revoked it and
when; approving or denying it raises ``Revoked`` naming the grant.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from _raw_sqlite import opened

from agentgate.capabilities import Call
from agentgate.cli.main import main
from agentgate.errors import Denied, InputError, Revoked, StoreError
from agentgate.gate import AgentIdentity, Approval, Authorization, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore, Store
from agentgate.store.approvals import VOIDED, ApprovalStore
from agentgate.store.grants import GrantRepository

NAMES = ("root", "supervisor", "researcher", "dana", "erin")
PUBLISH = Call.tool("publish", {"path": "reports/q"})


def _policy_text(dids: dict[str, str], quorum: int) -> str:
    return f"""
version: 1
trust_anchors:
  root: {{did: "{dids["root"]}"}}
principals:
  supervisor: {{kind: agent, did: "{dids["supervisor"]}", roles: [writer]}}
  researcher: {{kind: agent, did: "{dids["researcher"]}", roles: [writer]}}
  dana: {{kind: human, did: "{dids["dana"]}", roles: [owner]}}
  erin: {{kind: human, did: "{dids["erin"]}", roles: [owner]}}
tools:
  publish:
    args: {{path: {{type: string, required: true}}}}
    loggable: [path]
roles:
  writer:
    kind: agent
    capabilities:
      - resource: tool:publish
    ttl_s: 3600
    delegation:
      max_depth: 1
      max_ttl_s: 600
      capabilities:
        - resource: tool:publish
  owner:
    kind: human
    capabilities:
      - resource: tool:publish
    ttl_s: 3600
approvals:
  publish:
    resource: tool:publish
    approvers: [dana, erin]
    quorum: {quorum}
    expiry_s: 600
"""


@dataclass
class Desk:
    gate: Gate
    keys: dict[str, SigningKey]
    supervisor: AgentIdentity
    path: Path

    def ask(self, identity: AgentIdentity | None = None, call_id: str = "publish-0") -> Authorization:
        """The publish call of ``identity`` (the supervisor), paused for approval."""
        auth = self.gate.authorize(identity or self.supervisor, PUBLISH, call_id=call_id)
        assert auth.needs_approval and auth.request is not None, auth.reasons
        return auth

    def open_ids(self) -> list[str]:
        return [record.id for record in self.gate.approvals.open_records()]


def _desk(tmp_path: Path, quorum: int = 1) -> Desk:
    keys = {name: SigningKey.generate() for name in NAMES}
    policy = parse_policy(_policy_text({n: k.did for n, k in keys.items()}, quorum), source="desk.yaml")
    gate = Gate(policy, SQLiteStore(tmp_path / "agentgate.db"))
    supervisor = gate.issue(keys["root"], name="supervisor", key=keys["supervisor"], role="writer")
    return Desk(gate, keys, supervisor, tmp_path)


@pytest.fixture
def desk(tmp_path: Path) -> Iterator[Desk]:
    made = _desk(tmp_path)
    yield made
    made.gate.close()


def _kinds(gate: Gate) -> list[str]:
    gate.flush()
    return [entry.kind for entry in gate.audit.entries()]


def test_revoking_the_calls_grant_voids_its_pending_request(desk: Desk) -> None:
    auth = desk.ask()
    assert auth.request is not None
    request, call_hash = auth.request["id"], auth.request["call_hash"]
    assert desk.open_ids() == [request]

    desk.gate.revoke(desk.supervisor, reason="key leaked")

    assert desk.open_ids() == []
    assert desk.gate.approvals.open_for(call_hash, desk.supervisor.did) is None
    grant = desk.supervisor.grant_id
    with pytest.raises(Revoked, match=f"grant {grant} was revoked"):
        desk.gate.approvals.approve(request, desk.keys["dana"].did)
    with pytest.raises(Revoked, match=f"grant {grant} was revoked"):
        desk.gate.approvals.deny(request, desk.keys["dana"].did)
    assert desk.gate.approvals.approvers(request) == ()


def test_revoking_an_ancestor_voids_a_sub_agents_request(desk: Desk) -> None:
    helper = desk.gate.delegate(
        desk.supervisor,
        name="helper",
        key=SigningKey.generate(),
        capabilities=["tool:publish"],
        ttl=timedelta(minutes=5),
    )
    auth = desk.ask(helper)
    assert auth.request is not None and desk.open_ids() == [auth.request["id"]]

    desk.gate.revoke(desk.supervisor)  # the parent: every grant below it is dead too

    assert desk.open_ids() == []
    with pytest.raises(Revoked, match=f"grant {desk.supervisor.grant_id} was revoked"):
        desk.gate.approvals.approve(auth.request["id"], desk.keys["dana"].did)


def test_an_unrelated_revocation_leaves_the_request_open(desk: Desk) -> None:
    other = desk.gate.issue(desk.keys["root"], name="researcher", key=desk.keys["researcher"], role="writer")
    auth = desk.ask()
    assert auth.request is not None

    desk.gate.revoke(other)

    assert desk.open_ids() == [auth.request["id"]]
    desk.gate.approvals.approve(auth.request["id"], desk.keys["dana"].did)
    assert desk.gate.approvals.get(auth.request["id"]).state == "approved"


def test_a_revocation_written_by_another_process_is_seen_at_once(desk: Desk) -> None:
    auth = desk.ask()
    assert auth.request is not None
    other = SQLiteStore(desk.path / "agentgate.db")  # another process's connection to the file
    try:
        GrantRepository(other).revoke(desk.supervisor.grant_id, now=int(time.time()))
    finally:
        other.close()
    assert desk.open_ids() == []


def test_approval_list_does_not_show_a_request_whose_grant_was_revoked(
    desk: Desk, capsys: pytest.CaptureFixture[str]
) -> None:
    auth = desk.ask()
    assert auth.request is not None
    store = str(desk.path / "agentgate.db")
    assert main(["approval", "list", "--store", store, "--json"]) == 0
    assert [row["id"] for row in json.loads(capsys.readouterr().out)] == [auth.request["id"]]

    desk.gate.revoke(desk.supervisor)

    assert main(["approval", "list", "--store", store, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_a_vote_after_the_revocation_is_not_logged_as_an_approval(tmp_path: Path) -> None:
    """Quorum 2: each vote is recorded when it comes, before the call is decided. A vote for a
    request whose grant was revoked was recorded and logged as ``approval_given``."""
    desk = _desk(tmp_path, quorum=2)
    try:
        auth = desk.ask()
        assert auth.request is not None
        desk.gate.revoke(desk.supervisor)
        payload = auth.approval_payload()
        vote = Approval.sign(payload, desk.keys["dana"])  # Gate.approve refuses a void request (R71)

        refused = desk.gate.authorize(desk.supervisor, PUBLISH, call_id="publish-0", approval=vote)

        assert not refused.allowed and not refused.needs_approval
        assert desk.gate.approvals.approvers(auth.request["id"]) == ()
        assert "approval_given" not in _kinds(desk.gate)
    finally:
        desk.gate.close()


def test_declining_a_void_request_is_recorded_as_declined(desk: Desk) -> None:
    """As for an expired request: the call is refused in the log, referring to its request. Void
    by a revocation that did not close it (written straight into the store, as by an agentgate
    from before review R55): ``Gate.revoke`` closes the requests it makes void itself."""
    auth = desk.ask()
    GrantRepository(desk.gate.store).revoke(desk.supervisor.grant_id, now=int(time.time()))

    declined = desk.gate.decline(auth, "revoked meanwhile")

    assert not declined.allowed and declined.audit_index is not None
    entry = desk.gate.audit.entry(declined.audit_index)
    assert entry.kind == "deny" and entry.ref == auth.audit_index
    assert auth.request is not None  # settled as void (review R55), no longer pending
    assert desk.gate.approvals.get(auth.request["id"]).state == "denied"


@pytest.mark.parametrize("with_approval", [False, True], ids=["resumed", "resumed_with_approval"])
def test_a_paused_call_refused_after_the_revocation_settles_its_request(
    desk: Desk, with_approval: bool
) -> None:
    """Review R55: a call paused for approval, its grant revoked, then resumed (decided again,
    as LangGraph re-runs the node) was refused with a ``deny`` that referred to nothing, and its
    request stayed ``pending`` in the table for good. The ``deny`` now refers to the request's
    ``approval_required`` entry, as other approval outcomes do, and the request is closed as
    denied by ``agentgate:revoked``; a vote for it still raises ``Revoked``."""
    auth = desk.ask()
    assert auth.request is not None
    approval = Approval.parse(desk.gate.approve(auth.approval_payload(), desk.keys["dana"]))
    desk.gate.revoke(desk.supervisor, reason="key leaked")

    refused = desk.gate.authorize(
        desk.supervisor, PUBLISH, call_id="publish-0", approval=approval if with_approval else None
    )

    assert not refused.allowed and not refused.needs_approval and refused.audit_index is not None
    entry = desk.gate.audit.entry(refused.audit_index)
    assert entry.kind == "deny" and entry.ref == auth.audit_index
    record = desk.gate.approvals.get(auth.request["id"])
    assert (record.state, record.approver) == ("denied", VOIDED)
    with pytest.raises(Revoked, match=f"grant {desk.supervisor.grant_id} was revoked"):
        desk.gate.approvals.approve(auth.request["id"], desk.keys["erin"].did)
    with pytest.raises(InputError, match="cannot be declined"):
        desk.gate.decline(auth, "after the refusal")  # settled: the log says how it ended
    # The revocation's closure of the request (since review R55 also), then the call's refusal.
    assert _kinds(desk.gate).count("deny") == 2


OLD_SQLITE_TABLES = """
CREATE TABLE approvals (
    id TEXT PRIMARY KEY,
    call_hash TEXT NOT NULL,
    requester TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('pending', 'approved', 'denied', 'consumed')),
    approver TEXT,
    quorum INTEGER NOT NULL DEFAULT 1 CHECK (quorum >= 1),
    created REAL NOT NULL,
    expires_at REAL NOT NULL,
    decided_at REAL,
    consumed_at REAL
);
CREATE INDEX approvals_call ON approvals (call_hash);
CREATE TABLE approval_votes (
    approval_id TEXT NOT NULL REFERENCES approvals (id),
    approver TEXT NOT NULL,
    decided_at REAL NOT NULL,
    PRIMARY KEY (approval_id, approver)
);
CREATE TABLE approval_asked (
    approval_id TEXT PRIMARY KEY REFERENCES approvals (id),
    audit_index INTEGER NOT NULL
);
CREATE TABLE agentgate_revocations (
    grant_id TEXT PRIMARY KEY,
    revoked_at INTEGER NOT NULL,
    reason TEXT NOT NULL DEFAULT ''
);
"""
"""The approval tables before requests knew their grants, and the revocation table."""


def test_a_request_of_a_store_made_before_grants_were_kept_behaves_as_before(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    now = time.time()
    with opened(path) as old:
        old.executescript(OLD_SQLITE_TABLES)
        old.execute(
            "INSERT INTO approvals (id, call_hash, requester, state, quorum, created, expires_at) "
            "VALUES ('old', 'h1', 'did:key:r', 'pending', 1, ?, ?)",
            (now, now + 300),
        )
        old.execute("INSERT INTO agentgate_revocations VALUES ('g-any', 1, '')")
    store = SQLiteStore(path)
    try:
        approvals = ApprovalStore(store)
        assert [record.id for record in approvals.open_records()] == ["old"]
        assert approvals.open_for("h1", "did:key:r") is not None
        approvals.approve("old", "did:key:human")
        assert approvals.consume("old", "h1") == ("did:key:human",)
    finally:
        store.close()


def test_a_request_needs_no_grants_and_each_chain_link_counts(sqlite_store: Store) -> None:
    approvals = ApprovalStore(sqlite_store)
    expires = time.time() + 300
    bare = approvals.request("h0", "did:key:r", expires)
    chained = approvals.request("h1", "did:key:r", expires, grants=("g-root", "g-mid", "g-tip"))
    GrantRepository(sqlite_store).revoke("g-mid", now=int(time.time()))
    assert [record.id for record in approvals.open_records()] == [bare]
    assert approvals.open_for("h1", "did:key:r") is None
    with pytest.raises(Revoked, match="grant g-mid was revoked"):
        approvals.approve(chained, "did:key:human")


OLD_POSTGRES_TABLES = (
    OLD_SQLITE_TABLES.replace("REAL", "DOUBLE PRECISION")
    .replace("audit_index INTEGER", "audit_index BIGINT")
    .replace("revoked_at INTEGER", "revoked_at BIGINT")
)


@pytest.mark.postgres
def test_on_postgresql_a_revoked_grant_voids_the_request_and_old_stores_open(postgres_url: str) -> None:
    from agentgate.store._postgres import PostgresStore

    store = PostgresStore(postgres_url)
    try:
        now = time.time()
        with store.transaction() as tx:
            for statement in filter(str.strip, OLD_POSTGRES_TABLES.split(";")):
                tx.execute(statement)
            tx.execute(
                "INSERT INTO approvals (id, call_hash, requester, state, quorum, created, expires_at) "
                "VALUES ('old', 'h0', 'did:key:r', 'pending', 1, ?, ?)",
                (now, now + 300),
            )
        approvals = ApprovalStore(store)  # adds the grants table to the store of the old schema
        chained = approvals.request("h1", "did:key:r", now + 300, grants=("g-root", "g-tip"))
        assert [record.id for record in approvals.open_records()] == ["old", chained]

        GrantRepository(store).revoke("g-root", now=int(now))

        assert [record.id for record in approvals.open_records()] == ["old"]
        assert approvals.open_for("h1", "did:key:r") is None
        with pytest.raises(Revoked, match="grant g-root was revoked"):
            approvals.approve(chained, "did:key:human")
        with pytest.raises(Revoked, match="grant g-root was revoked"):
            approvals.deny(chained, "did:key:human")
        approvals.approve("old", "did:key:human")
        assert approvals.consume("old", "h0") == ("did:key:human",)
    finally:
        store.close()


def _voided(desk: Desk, auth: Authorization) -> list[int]:
    """The indexes of the ``deny`` entries that refer to ``auth``'s ``approval_required`` entry."""
    desk.gate.flush()
    return [
        i
        for i, entry in enumerate(desk.gate.audit.entries())
        if entry.kind == "deny" and entry.ref == auth.audit_index
    ]


def _three_requests(desk: Desk) -> tuple[Authorization, Authorization, Authorization]:
    """The supervisor's request, its sub-agent's and an unrelated agent's, all pending."""
    helper = desk.gate.delegate(
        desk.supervisor,
        name="helper",
        key=SigningKey.generate(),
        capabilities=["tool:publish"],
        ttl=timedelta(minutes=5),
    )
    other = desk.gate.issue(desk.keys["root"], name="researcher", key=desk.keys["researcher"], role="writer")
    return desk.ask(), desk.ask(helper, "publish-1"), desk.ask(other, "publish-2")


@pytest.mark.parametrize("how", ["revoke", "revoke_holder", "cli"])
def test_a_revocation_closes_the_requests_it_makes_void(desk: Desk, how: str) -> None:
    """Review R55: a request made void by a revocation was closed only when its call was resumed
    and refused; a run never resumed left it ``pending`` in the table, its ``approval_required``
    entry unanswered, until pruned. The revocation now closes, in its own transaction, the
    requests of the revoked grant and of every grant below it, as denied by ``agentgate:revoked``,
    each with a ``deny`` entry referring to its ``approval_required`` entry; a later resume of the
    call is still refused, its ``deny`` referring to the request too."""
    own, below, unrelated = _three_requests(desk)
    if how == "revoke":
        desk.gate.revoke(desk.supervisor, reason="key leaked")
    elif how == "revoke_holder":
        desk.gate.revoke_holder(desk.supervisor.did, reason="key leaked")
    else:
        store = str(desk.path / "agentgate.db")
        assert (
            main(["grant", "revoke", desk.supervisor.grant_id, "--store", store, "--reason", "leaked"]) == 0
        )

    for auth in (own, below):
        assert auth.request is not None
        record = desk.gate.approvals.get(auth.request["id"])
        assert (record.state, record.approver) == ("denied", VOIDED)
        closing = _voided(desk, auth)
        assert len(closing) == 1
        entry = desk.gate.audit.entry(closing[0])
        assert entry.resource == "tool:publish" and entry.chain_hash == auth.identity.grant_id  # type: ignore[union-attr]
        assert entry.reasons == (
            f"approval request {auth.request['id']} is void: grant {desk.supervisor.grant_id} was revoked",
        )
    assert unrelated.request is not None
    assert desk.gate.approvals.get(unrelated.request["id"]).state == "pending"
    assert _voided(desk, unrelated) == []

    with pytest.raises(InputError, match="cannot be declined"):
        desk.gate.decline(own, "after the revocation")  # answered in the log by the revocation
    refused = desk.gate.authorize(desk.supervisor, PUBLISH, call_id="publish-0")
    assert not refused.allowed and not refused.needs_approval and refused.audit_index is not None
    assert desk.gate.audit.entry(refused.audit_index).ref == own.audit_index
    assert len(_voided(desk, own)) == 2  # the request's closure, then the call's refusal


def test_revoking_a_grant_revoked_already_closes_nothing_more(desk: Desk) -> None:
    """Review R55: the second revocation of a grant writes nothing (``Revocation.already``), so
    it closes no request twice either."""
    desk.ask()
    desk.gate.revoke(desk.supervisor)
    before = _kinds(desk.gate)
    assert before.count("deny") == 1

    assert desk.gate.revoke(desk.supervisor).already
    assert _kinds(desk.gate) == before


def test_grant_revoke_revokes_when_the_approvals_tables_cannot_be_made(
    desk: Desk, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R55: ``grant revoke`` now also closes the requests it makes void, which needs the
    approvals tables; on a store whose upgrade (``store init``) was not run, a role that may not
    create them must still revoke (the lever for a leaked key): the revocation and its entry are
    written, and the void request, not listed and refused, is left to be closed with its call."""
    auth = desk.ask()
    assert auth.request is not None

    def cannot(self: ApprovalStore, store: Store) -> None:
        raise StoreError("approval_calls (approvals) is missing and this role may not create it")

    monkeypatch.setattr(ApprovalStore, "__init__", cannot)
    store = str(desk.path / "agentgate.db")
    assert main(["grant", "revoke", desk.supervisor.grant_id, "--store", store]) == 0
    monkeypatch.undo()

    assert "revoke" in _kinds(desk.gate) and desk.open_ids() == []
    assert desk.gate.approvals.get(auth.request["id"]).state == "pending"


@pytest.mark.parametrize("quorum", [1, 2])
@pytest.mark.parametrize("call_id", ["publish-0", None], ids=["tool_call_id", "no_call_id"])
def test_an_approval_of_a_call_revoked_in_the_store_never_runs_it_and_closes_its_request(
    tmp_path: Path, quorum: int, call_id: str | None
) -> None:
    """Review R56: a call without a call id (``Gate.authorize`` called directly; likewise a model
    call or a GPU lease), paused for approval, its grant revoked straight in the store (another
    process's ``GrantRepository.revoke``), then decided with a valid approval was refused, but its
    void request stayed ``pending`` for good and the ``deny`` referred to nothing: only a tool
    call with an id closed it. Any call refused as revoked now closes its void request, as denied
    by ``agentgate:revoked``, its ``deny`` referring to the ``approval_required`` entry; the
    approval is never used nor logged as given, and the request can no longer be declined."""
    desk = _desk(tmp_path, quorum=quorum)
    try:
        gate = desk.gate
        auth = gate.authorize(desk.supervisor, PUBLISH, call_id=call_id)
        assert auth.needs_approval and auth.request is not None
        yes = Approval.parse(gate.approve(auth.approval_payload(), desk.keys["dana"]))
        GrantRepository(gate.store).revoke(desk.supervisor.grant_id, now=int(time.time()))

        refused = gate.authorize(desk.supervisor, PUBLISH, call_id=call_id, approval=yes)

        assert refused.verdict == "deny" and refused.audit_index is not None
        assert any(finding.code == "revoked" for finding in refused.findings)
        entry = gate.audit.entry(refused.audit_index)
        assert entry.kind == "deny" and entry.ref == auth.audit_index
        record = gate.approvals.get(auth.request["id"])
        assert (record.state, record.approver) == ("denied", VOIDED)
        assert gate.approvals.approvers(auth.request["id"]) == ()
        assert _kinds(gate).count("approval_given") == 0
        with pytest.raises(InputError, match="cannot be declined"):
            gate.decline(auth, "after the refusal")
    finally:
        desk.gate.close()


def test_declining_a_void_request_that_expired_is_recorded_as_declined(desk: Desk) -> None:
    """Review R56: a request void by a revocation written straight into the store, and expired
    before anyone answered, could not be declined (``InputError``: void, and too late to be
    closed as void), while an expired request is declined: the middleware then refused the call
    with no entry, and the request's ``approval_required`` entry stayed unanswered in the log. It
    is now declined as an expired one: a ``deny`` referring to it (and, since review R82, the
    request closed as declined, which no vote reopens)."""
    auth = desk.ask()
    assert auth.request is not None
    GrantRepository(desk.gate.store).revoke(desk.supervisor.grant_id, now=int(time.time()))
    with desk.gate.store.transaction() as tx:
        tx.execute("UPDATE approvals SET expires_at = ? WHERE id = ?", (time.time() - 1, auth.request["id"]))

    declined = desk.gate.decline(auth, "nobody answered")

    assert not declined.allowed and declined.audit_index is not None
    entry = desk.gate.audit.entry(declined.audit_index)
    assert entry.kind == "deny" and entry.ref == auth.audit_index
    record = desk.gate.approvals.get(auth.request["id"])
    assert (record.state, record.approver) == ("denied", "agentgate:declined")
    with pytest.raises(Denied, match="is denied"):
        desk.gate.approvals.approve(auth.request["id"], desk.keys["dana"].did)


def test_an_approval_found_void_as_it_is_used_closes_its_request(
    desk: Desk, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R56: on PostgreSQL a revocation written straight into the store (not through the
    Gate, so without its lock) can commit between the decision's read of the revocations and the
    use of the approval; the use then raises ``Revoked`` and the call was refused, referring to
    its request, but the request stayed ``pending`` (void) for good. It is now closed with the
    refusal, as denied by ``agentgate:revoked``. Here the decision's read is made to miss the
    revocation committed before it, as that read would."""
    auth = desk.ask()
    assert auth.request is not None
    yes = Approval.parse(desk.gate.approve(auth.approval_payload(), desk.keys["dana"]))
    GrantRepository(desk.gate.store).revoke(desk.supervisor.grant_id, now=int(time.time()))
    monkeypatch.setattr(desk.gate.grants, "revoked", lambda grant_ids: set())

    refused = desk.gate.authorize(desk.supervisor, PUBLISH, call_id="publish-0", approval=yes)

    assert refused.verdict == "deny" and refused.audit_index is not None
    assert any("is void" in reason for reason in refused.reasons), refused.reasons
    assert desk.gate.audit.entry(refused.audit_index).ref == auth.audit_index
    record = desk.gate.approvals.get(auth.request["id"])
    assert (record.state, record.approver) == ("denied", VOIDED)
    assert _kinds(desk.gate).count("approval_given") == 0
