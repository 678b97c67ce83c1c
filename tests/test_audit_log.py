"""The audit log (agentgate/store/audit/) on both stores: appends (one entry or a group commit
of several), append-only enforcement, checkpoints, proofs, and what explain and verify say of an
entry changed in place."""

from __future__ import annotations

import base64
import os
import sqlite3
import stat
from pathlib import Path
from typing import Any

import pytest
from test_audit_checkpoints import ALICE as CHECKPOINTS_ALICE
from test_audit_checkpoints import _log as _checkpoints_log

from agentgate.audit.entry import AuditEntry, argument_digest, redact
from agentgate.audit.merkle import leaf_hash, verify_consistency
from agentgate.audit.note import Checkpoint, open_checkpoint
from agentgate.audit.proof import verify_bundle
from agentgate.cli.main import main
from agentgate.errors import BeyondLogEnd, InputError, StoreError, TamperDetected
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore, Store
from agentgate.store.audit import AuditLog, log_key_path, open_log_key

ALICE = SigningKey(b"\x01" * 32).did
# What a refused statement raises: SQLite's own error inside the transaction, StoreError on PostgreSQL.
REFUSED = (StoreError, sqlite3.Error)


def decision(n: int, kind: str = "allow") -> dict[str, object]:
    args = {"amount": n, "card": "4111-1111-1111-1111"}
    return {
        "kind": kind,
        "principal": ALICE,
        "chain_hash": "sha256:" + "ab" * 32,
        "policy_hash": "sha256:" + "cd" * 32,
        "rule": "refunds-small",
        "resource": "tool:payments.refund",
        "args_digest": argument_digest(args),
        "args": redact(args, ["amount"]),
        "budget_delta": n,
        "reasons": ["capability covers call"],
    }


@pytest.fixture
def log(store: Store) -> AuditLog:
    return AuditLog(store, SigningKey(b"\x07" * 32), origin="test.example/audit")


def test_appends_get_gap_free_indexes_and_verify(log: AuditLog) -> None:
    assert [log.append(decision(i)) for i in range(5)] == [0, 1, 2, 3, 4]
    report = log.verify()
    assert report.ok and report.size == 5 and report.first_bad_index is None
    assert log.entry(3).budget_delta == 3


def test_secrets_are_stored_only_as_a_digest(log: AuditLog, store: Store) -> None:
    log.append(decision(1))
    raw = bytes(store.query("SELECT entry FROM audit_log")[0][0])
    assert b"4111" not in raw
    assert log.entry(0).args == {"amount": 1}


def test_database_refuses_update_and_delete(log: AuditLog, store: Store) -> None:
    log.append(decision(1))
    log.checkpoint()
    for statement in (
        "UPDATE audit_log SET entry = entry",
        "DELETE FROM audit_log",
        "UPDATE audit_checkpoints SET size = 9",
        "DELETE FROM audit_checkpoints",
    ):
        with pytest.raises(REFUSED) as caught, store.transaction() as tx:
            tx.execute(statement)
        assert "append-only" in str(caught.value)
    assert log.verify().ok


def test_database_refuses_an_index_that_is_not_the_next(log: AuditLog, store: Store) -> None:
    log.append(decision(1))
    with pytest.raises(REFUSED) as caught, store.transaction() as tx:
        tx.execute("INSERT INTO audit_log (idx, entry, leaf_hash) VALUES (?, ?, ?)", (5, b"x", b"\x00" * 32))
    assert "next" in str(caught.value)


def test_entry_commits_with_the_callers_transaction(log: AuditLog, store: Store) -> None:
    with pytest.raises(RuntimeError), store.transaction() as tx:
        log.append(decision(1), tx=tx)
        raise RuntimeError("the budget change failed")
    assert log.size() == 0
    with store.transaction() as tx:
        assert log.append(decision(2), tx=tx) == 0
    assert log.size() == 1


def test_bad_fields_write_nothing(log: AuditLog) -> None:
    with pytest.raises(InputError):
        log.append({**decision(1), "kind": "maybe"})
    with pytest.raises(InputError):
        log.append({**decision(1), "index": 7})
    assert log.size() == 0


def test_checkpoint_is_a_signed_note_over_the_tree(log: AuditLog) -> None:
    for i in range(3):
        log.append(decision(i))
    note = log.checkpoint()
    lines = note.split("\n")
    assert lines[0] == "test.example/audit" and lines[1] == "3" and lines[3] == ""
    assert lines[4].startswith("\u2014 test.example/audit ")
    checkpoint = open_checkpoint(note, log.public_key)
    assert checkpoint == Checkpoint("test.example/audit", 3, log.verify().root)
    assert log.checkpoint() == note  # nothing new: no second checkpoint
    with pytest.raises(TamperDetected):
        open_checkpoint(note.replace("\n3\n", "\n4\n"), log.public_key)
    with pytest.raises(TamperDetected):
        open_checkpoint(note, SigningKey(b"\x08" * 32).public)


def test_proof_bundle_verifies_offline_with_only_the_public_key(log: AuditLog) -> None:
    for i in range(11):
        log.append(decision(i, "deny" if i == 6 else "allow"))
    bundle = log.prove(6).text()
    assert bundle.startswith("c2sp.org/tlog-proof@v1\nextra ")
    entry, checkpoint = verify_bundle(bundle, log.public_key)
    assert entry.kind == "deny" and entry.index == 6 and checkpoint.size == 11
    forged = AuditEntry.from_bytes(log.entry_bytes(6)).model_copy(update={"kind": "allow"}).to_bytes()
    tampered = bundle.replace(
        base64.b64encode(log.entry_bytes(6)).decode(), base64.b64encode(forged).decode()
    )
    with pytest.raises(TamperDetected):
        verify_bundle(tampered, log.public_key)
    with pytest.raises(TamperDetected):
        verify_bundle(bundle, SigningKey(b"\x09" * 32).public)


def test_consistency_between_checkpoints(log: AuditLog) -> None:
    for i in range(5):
        log.append(decision(i))
    old = open_checkpoint(log.checkpoint(), log.public_key)
    for i in range(5, 13):
        log.append(decision(i))
    new = open_checkpoint(log.checkpoint(), log.public_key)
    verify_consistency(old.size, new.size, log.consistency(old.size, new.size), old.root, new.root)


def test_log_key_is_created_once_with_mode_0600(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTGATE_LOG_KEY", raising=False)
    store = SQLiteStore(tmp_path / "db" / "agentgate.db")
    key = open_log_key(store)
    path = log_key_path(store)
    assert path == tmp_path / "db" / "log.key"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert (tmp_path / "db" / "log.pub").read_text().strip() == key.did
    assert open_log_key(store) == key
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "elsewhere" / "mylog.key"))
    assert open_log_key(store) != key
    store.close()


def test_checkpoints_of_a_rotated_out_key_still_verify(store: Store) -> None:
    old_key, new_key = SigningKey(b"\x07" * 32), SigningKey(b"\x08" * 32)
    log = AuditLog(store, old_key, origin="test.example/audit")
    log.append(decision(1))
    log.checkpoint()
    rotated = AuditLog(store, new_key, origin="test.example/audit")
    rotated.append(decision(2))
    assert not rotated.verify().ok  # the old checkpoint is not trusted without its key
    with pytest.raises(TamperDetected, match="no signature by the log key"):
        rotated.checkpoint()  # nor signed over: a new checkpoint builds on a trusted one only
    trusted = AuditLog(store, new_key, origin="test.example/audit", previous_keys=[old_key.public])
    trusted.checkpoint()
    report = trusted.verify()
    assert report.ok and report.checkpoints_checked == 2


def test_concurrent_appends_get_distinct_gap_free_indexes(store: Store) -> None:
    import threading

    log = AuditLog(store, SigningKey(b"\x07" * 32), origin="test.example/audit")
    got: list[int] = []
    lock = threading.Lock()

    def writer() -> None:
        for i in range(10):
            index = log.append(decision(i))
            with lock:
                got.append(index)

    threads = [threading.Thread(target=writer) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == list(range(60))
    assert log.verify().ok


def test_no_entry_no_spend_the_reservation_rolls_back_with_a_failed_append(
    log: AuditLog, store: Store
) -> None:
    from agentgate.store.ledger import BudgetLedger

    ledger = BudgetLedger(store)
    with pytest.raises(InputError), store.transaction() as tx:
        ledger.reserve(tx, ["root"], {"root": 100}, 40)
        log.append({**decision(1), "principal": ""}, tx=tx)  # the entry cannot be written
    assert ledger.remaining("root") is None and log.size() == 0
    with store.transaction() as tx:
        ledger.reserve(tx, ["root"], {"root": 100}, 40)
        log.append(decision(40), tx=tx)
    assert ledger.remaining("root") == 60 and log.size() == 1


def test_group_append_is_all_or_nothing(log: AuditLog) -> None:
    log.append(decision(0))
    assert log.append_many([decision(1), decision(2), decision(3)]) == [1, 2, 3]
    with pytest.raises(InputError):
        log.append_many([decision(4), {**decision(5), "kind": "perhaps"}])
    assert log.size() == 4 and log.verify().ok
    assert [e.budget_delta for e in log.entries()] == [0, 1, 2, 3]


@pytest.mark.postgres
def test_a_select_insert_only_role_can_log_but_not_bypass_the_triggers(
    postgres_server: Any, postgres_url: str
) -> None:
    from agentgate.store._postgres import PostgresStore
    from agentgate.store.approvals import ApprovalStore
    from agentgate.store.ledger import BudgetLedger

    with PostgresStore(postgres_url) as owner:
        AuditLog(owner, SigningKey(b"\x07" * 32), origin="test.example/audit").append(decision(0))
        BudgetLedger(owner)
        ApprovalStore(owner)
        with owner.transaction() as tx:
            tx.execute(
                "DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'ag_app') "
                "THEN CREATE ROLE ag_app LOGIN; END IF; END $$"
            )
            tx.execute("GRANT SELECT, INSERT ON audit_log, audit_checkpoints TO ag_app")
            tx.execute(
                "GRANT SELECT, INSERT, UPDATE ON budget_ledger, budget_reservations, approvals TO ag_app"
            )
    app_url = postgres_url.replace(f"postgresql://{postgres_server.user}@", "postgresql://ag_app@")
    with PostgresStore(app_url) as app:
        log = AuditLog(app, SigningKey(b"\x07" * 32), origin="test.example/audit")
        assert log.append(decision(1)) == 1
        log.checkpoint()
        for statement in (
            "ALTER TABLE audit_log DISABLE TRIGGER USER",
            "UPDATE audit_log SET entry = entry",
            "TRUNCATE audit_log",
        ):
            with pytest.raises(StoreError), app.transaction() as tx:
                tx.execute(statement)
        assert log.verify().ok and log.size() == 2
        ledger = BudgetLedger(app)
        ledger.commit(ledger.reserve(None, ["g"], {"g": 10}, 4), 3)
        assert ledger.remaining("g") == 7
        ApprovalStore(app).request("call", "did:key:zA", 1e10)


def test_an_entry_edited_in_place_with_its_leaf_hash_is_never_called_a_restore(tmp_path: Path) -> None:
    # Kills: AuditLog.verify calling any unexplained root mismatch a restore (not only at the size
    # only the saved checkpoint has), and the saved checkpoint's size taken as "saved only" when a
    # stored checkpoint has it too. Here the saved checkpoint is the stored one: the log was
    # edited in place (an entry and its leaf hash), not restored from an older copy.
    with SQLiteStore(tmp_path / "a.db") as store:
        log = AuditLog(store, SigningKey(bytes([0x46]) * 32), origin="r46.example/log")
        log.append_many([{"kind": "allow", "principal": "did:key:zA"}] * 4)
        saved = log.checkpoint()
        log.append_many([{"kind": "allow", "principal": "did:key:zB"}] * 2)
        edited = log.entry_bytes(1).replace(b"zA", b"zE")
        with store.transaction() as tx:  # a tamperer with write access to the file
            tx.execute("DROP TRIGGER audit_log_no_update")
            tx.execute(
                "UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = 1", (edited, leaf_hash(edited))
            )
        for report in (log.verify(saved), log.verify()):
            assert not report.ok
            assert any("changed together with its leaf hash" in p for p in report.problems), report.problems
            assert not any("restored" in p or "older copy" in p for p in report.problems), report.problems


KEY = SigningKey(b"\x48" * 32)


ORIGIN = "r47.example/leftovers"


ALICE_DID = "did:key:zAlice"


def _log(tmp_path: Path, n: int) -> AuditLog:
    log = AuditLog(SQLiteStore(tmp_path / "agentgate.db"), KEY, ORIGIN)
    for i in range(n):
        log.append({"kind": "allow", "principal": ALICE_DID, "resource": "tool:t", "budget_delta": i})
    return log


# The attacker drops the append-only triggers first, as anyone with the database owner's rights can.
def _attack(log: AuditLog, sql: str, params: tuple[object, ...] = ()) -> None:
    with log.store.transaction() as tx:
        for name in ("audit_log_next_index", "audit_log_no_update", "audit_log_no_delete"):
            tx.execute(f"DROP TRIGGER IF EXISTS {name}")
        tx.execute(sql, params)


def test_explain_refuses_an_unproven_row_holding_another_entry(tmp_path: Path) -> None:
    """Kills s18: ``explain`` dropping its check that each row holds the entry of its own index.
    Rule: an entry newer than the last checkpoint (no proof can catch it) copied over another
    row, leaf hash and all, is refused, never shown as the entry asked for."""
    log = _log(tmp_path, 3)
    assert log.explain(1).entry.index == 1
    _attack(
        log,
        "UPDATE audit_log SET entry = (SELECT entry FROM audit_log WHERE idx = 2), "
        "leaf_hash = (SELECT leaf_hash FROM audit_log WHERE idx = 2) WHERE idx = 1",
    )
    with pytest.raises(TamperDetected, match="entry 1 holds the entry of index 2"):
        log.explain(1)


def test_explain_lists_the_entry_at_the_checkpoint_size_as_unproven(tmp_path: Path) -> None:
    """Kills x6: ``_prove_included`` listing as unproven only the entries past the checkpoint's
    size (``idx > size``). Rule: the first entry after a checkpoint of size n (index n) is not
    in the signed tree, so explain says it is unproven, never that it is proven."""
    log = _log(tmp_path, 3)
    log.checkpoint()
    log.append({"kind": "outcome", "principal": ALICE_DID, "ref": 2, "status": "ok"})
    shown = log.explain(3)
    assert shown.checkpoint is not None and shown.checkpoint.size == 3
    assert shown.unproven == (3,)
    assert [e.index for e in shown.related] == [2]


def test_explain_does_not_take_a_row_of_the_reference_index_as_evidence(tmp_path: Path) -> None:
    """Kills x2: ``_related`` keeping every row it reads (``idx != index`` only), not just the
    entries whose own ``ref`` is the one asked for. Rule: an ``audit_refs`` row pointed at an
    unrelated entry does not make explain show an entry that does not refer to it, and with
    the index dropped (a whole-log read) only the entries that refer to it are shown."""
    log = _log(tmp_path, 3)
    log.append({"kind": "outcome", "principal": ALICE_DID, "ref": 1, "status": "ok"})
    log.checkpoint()
    assert log.refs_indexed
    assert [e.index for e in log.explain(2).related] == []
    with log.store.transaction() as tx:
        tx.execute("UPDATE audit_refs SET ref = 2 WHERE idx = 3")
    assert [e.index for e in log.explain(2).related] == []
    assert not log.verify().ok
    # A role that may not build the index opens the log with refs_indexed False: a whole-log read.
    again = AuditLog(log.store, KEY, ORIGIN)
    again.refs_indexed = False
    assert [e.index for e in again.explain(1).related] == [3]
    assert [e.index for e in again.explain(2).related] == []


def test_append_many_writes_every_entry(tmp_path: Path) -> None:
    """Kills: ``append_many`` writing only part of the batch. Rule: a group commit writes all its
    entries or none, each at its own next index."""
    log = _checkpoints_log(tmp_path, 1)
    assert log.append_many([{"kind": "deny", "principal": CHECKPOINTS_ALICE}] * 3) == [1, 2, 3]
    assert log.size() == 4 and log.verify().ok


@pytest.mark.parametrize("ref", [2**63, 2**64, 10**30])
def test_explain_of_an_entry_referring_beyond_any_index_names_no_related_entry(
    log: AuditLog, ref: int
) -> None:
    """Kills: ``explain`` reading the entry an entry refers to by an index no store's integer
    holds (an ``OverflowError`` from the SQLite driver: a traceback from ``audit explain``).
    Rule: an entry whose ``ref`` is 2**63 or more (the format bounds it from below only: an API
    caller, or a tamperer after the last checkpoint, can write one) refers to no entry, as one
    past the log's end does: it is explained with nothing related, and ``entries_at`` of such an
    index is the ``BeyondLogEnd`` of any index past the end."""
    log.append(decision(1))
    index = log.append({"kind": "outcome", "principal": ALICE, "status": "ok", "ref": ref})
    explained = log.explain(index)
    assert explained.entry.ref == ref and explained.related == ()
    assert [e.index for e in log.explain(0).related] == []
    with pytest.raises(BeyondLogEnd):
        log.entries_at([0, ref])


def test_a_cli_explain_of_an_entry_referring_beyond_any_index_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same rule at the command line: one entry shown, exit 0, no traceback."""
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    log = _log(tmp_path, 1)
    index = log.append({"kind": "outcome", "principal": ALICE_DID, "status": "ok", "ref": 2**64})
    log.checkpoint()
    db = str(tmp_path / "agentgate.db")
    assert main(["audit", "explain", str(index), "--store", db, "--key", KEY.public.did]) == 0
    out = capsys.readouterr().out
    assert f"entry {index}: outcome" in out and "1 of 1 entries proven" in out


@pytest.mark.parametrize(
    "garbage",
    [b"\xff" + b"{}", b"not json", b"[1, 2]", b'{"index": 1}'],
    ids=["not-utf8", "not-json", "not-an-object", "not-an-entry"],
)
def test_a_malformed_entry_read_from_the_log_is_named_by_its_index(tmp_path: Path, garbage: bytes) -> None:
    """Kills: ``entries``, ``entry``, ``entries_at`` and ``explain`` raising ``from_bytes``'s error
    as it is (``entry bytes are not UTF-8 JSON: ...``), which says what is wrong but not where:
    ``audit show`` stopped on a tampered log with an error that named no entry. Rule: a row
    whose bytes are no canonical entry is ``TamperDetected`` naming its index, however it is read."""
    log = _log(tmp_path, 4)
    _attack(log, "UPDATE audit_log SET entry = ? WHERE idx = 2", (garbage,))
    named = "audit log: entry 2 is malformed: "
    with pytest.raises(TamperDetected, match=named):
        list(log.entries())
    with pytest.raises(TamperDetected, match=named):
        log.entry(2)
    with pytest.raises(TamperDetected, match=named):
        log.entries_at([1, 2])
    with pytest.raises(TamperDetected, match=named):
        log.explain(2)
    assert [e.index for e in log.entries(skip_malformed=True)] == [0, 1, 3]


def test_cli_show_names_the_malformed_entry_it_stops_at(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same rule at the command line: ``audit show`` prints the entries before it, then one
    error line naming the entry, exit 2 (after the one warning line that the triggers ``_attack``
    dropped are missing: review R57)."""
    log = _log(tmp_path, 4)
    _attack(log, "UPDATE audit_log SET entry = CAST(? AS BLOB) || entry WHERE idx = 2", (b"\xff",))
    db = str(tmp_path / "agentgate.db")
    assert main(["audit", "show", "--store", db, "--key", KEY.public.did]) == 2
    captured = capsys.readouterr()
    assert len(captured.out.splitlines()) == 2
    warning, error = captured.err.splitlines()
    assert warning.startswith("agentgate: warning: the protection trigger audit_log_next_index")
    assert error.startswith("agentgate: error: audit log: entry 2 is malformed: entry bytes are not UTF-8")


def _reopened(store: Store) -> Store:
    """Another store object on the same database, as a new process opens it (nothing cached)."""
    if isinstance(store, SQLiteStore):
        return SQLiteStore(store.path)
    from agentgate.store._postgres import PostgresStore

    return PostgresStore(store.url)


def _log_tables(store: Store) -> set[str]:
    names = "('audit_log', 'audit_checkpoints')"
    if store.dialect == "sqlite":
        rows = store.query(f"SELECT name FROM sqlite_master WHERE type = 'table' AND name IN {names}")
    else:
        rows = store.query(f"SELECT relname FROM pg_class WHERE relkind = 'r' AND relname IN {names}")
    return {row[0] for row in rows}


def _drop_log(store: Store, *tables: str) -> None:
    with store.transaction() as tx:
        for table in tables or ("audit_log", "audit_checkpoints"):
            tx.execute(f"DROP TABLE {table}")


def test_a_dropped_log_is_refused_by_every_writer_and_made_anew_by_none(store: Store) -> None:
    """Review R55: a Gate (or ``grant revoke``) opened on a store whose audit tables were dropped
    started a new log at index 0, which then verified as intact. Rule: the store records that its
    log was made, with the log's tables; a log table missing beside that record is ``LogDropped``
    (a ``StoreError``) for every opener, and nothing is created."""
    from test_gate import POLICY

    from agentgate.errors import LogDropped
    from agentgate.gate import Gate
    from agentgate.policy import parse_policy

    key = SigningKey(b"\x07" * 32)
    log = AuditLog(store, key)
    log.append(decision(0))
    log.checkpoint()
    _drop_log(store)
    keys = {n: SigningKey.generate().did for n in ("root", "agent", "lead", "helper")}
    policy = parse_policy(POLICY.format(budget=1000, **keys), source="gate.yaml")
    again = _reopened(store)
    try:
        for opening in (
            lambda: AuditLog(again, key),
            lambda: AuditLog(again, key, create=False),
            lambda: Gate(policy, again, log_key=key),
        ):
            with pytest.raises(LogDropped, match="the audit log was dropped from this store") as raised:
                opening()
            assert isinstance(raised.value, StoreError)
        assert _log_tables(again) == set()
    finally:
        again.close()


def test_one_log_table_dropped_is_a_dropped_log(store: Store) -> None:
    """Review R55: the checkpoints dropped alone were made anew, empty: the log then read as
    never signed. Rule: either log table missing beside the record is a dropped log."""
    from agentgate.errors import LogDropped

    AuditLog(store, SigningKey(b"\x07" * 32)).append(decision(0))
    _drop_log(store, "audit_checkpoints")
    again = _reopened(store)
    try:
        with pytest.raises(LogDropped, match="its table audit_checkpoints is missing"):
            AuditLog(again, SigningKey(b"\x07" * 32))
        assert _log_tables(again) == {"audit_log"}
    finally:
        again.close()


def test_a_log_made_before_the_record_gets_it_when_opened(store: Store) -> None:
    """Review R55: a store made by a version before ``agentgate_store_parts`` holds the log's
    tables and no record; opening the log writes the record, so that dropping the log is then
    caught, and a log never made is still made."""
    from agentgate.errors import LogDropped

    AuditLog(store, SigningKey(b"\x07" * 32)).append(decision(0))
    with store.transaction() as tx:
        tx.execute("DROP TABLE agentgate_store_parts")  # as an earlier version left the store
    upgraded = _reopened(store)
    try:
        assert AuditLog(upgraded, SigningKey(b"\x07" * 32)).size() == 1
        assert sorted(row[0] for row in upgraded.query("SELECT part FROM agentgate_store_parts")) == [
            "audit_log",
            "audit_repairs",  # its table is there too (review R57)
        ]
        _drop_log(upgraded)
    finally:
        upgraded.close()
    later = _reopened(store)
    try:
        with pytest.raises(LogDropped):
            AuditLog(later, SigningKey(b"\x07" * 32))
    finally:
        later.close()
