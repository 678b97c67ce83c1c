"""Stores written by earlier versions of agentgate, opened by this one.

The earlier forms are written out here as those versions wrote them (not taken from git):

- an audit entry of a refused call whose loggable argument held a value nested deeper than 254
  levels, as every version before 2026-11-30 01:10 (commit 55ba73a) wrote it (they bounded the
  nesting only by Python's recursion limit; this one refuses to write more than ``MAX_DEPTH``);
- the budget reservations table before it was ``WITHOUT ROWID`` (before 2026-11-29 19:12,
  commit 6696a8f), with a reservation still held at the upgrade.

The end-to-end runs behind this file (the earlier versions' own code writing a store, this one
opening it) are summed up in docs/operations.md, "Upgrading".
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import pytest
from _raw_sqlite import opened

from agentgate.audit.merkle import RootAccumulator, leaf_hash
from agentgate.audit.note import Checkpoint, sign_checkpoint
from agentgate.cli.main import main
from agentgate.errors import InputError
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog
from agentgate.store.ledger import BudgetLedger


def root_of(leaves: Iterable[bytes]) -> bytes:
    """The Merkle tree hash of the given leaf hashes (``RootAccumulator`` over them)."""
    acc = RootAccumulator()
    for leaf in leaves:
        acc.add(leaf)
    return acc.root()


DEPTH = 300
"""Deeper than ``MAX_DEPTH`` (254), well within what the earlier versions wrote (~990)."""


def _deep(depth: int) -> object:
    value: object = "x"
    for _ in range(depth):
        value = [value]
    return value


def _earlier_deny_entry(index: int) -> bytes:
    """The bytes an earlier Gate wrote for a refused call of a tool whose loggable argument
    ``doc`` (declared a string) held a list nested ``DEPTH`` deep: its reference encoder
    (``json.dumps``, sorted keys, no spaces), which had no bound on nesting."""
    fields = {
        "approver": None,
        "args": {"doc": _deep(DEPTH)},
        "args_digest": "sha256:" + "2" * 64,
        "budget_delta": 0,
        "chain_hash": "5" * 64,
        "index": index,
        "kind": "deny",
        "policy_hash": "5" * 64,
        "principal": "did:key:z6Mkk5GJpvw2yQ3zTnAkw1G8uyAG87Sso2CgkoS4vQjewbQ6",
        "reasons": ["argument 'doc' must be a string, got list"],
        "ref": None,
        "resource": "tool:store",
        "rule": None,
        "status": None,
        "time": "2026-11-29T23:20:21.556698Z",
        "v": 1,
    }
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _log_with_an_earlier_deep_entry(tmp_path: Path, *, checkpointed: bool) -> tuple[Path, SigningKey]:
    """A SQLite store whose log holds one entry of this version, the earlier version's deep entry,
    and (``checkpointed``) a checkpoint the earlier version signed over both."""
    path = tmp_path / "agentgate.db"
    key = SigningKey.generate()
    store = SQLiteStore(path)
    try:
        log = AuditLog(store, key)
        log.append({"kind": "revoke", "principal": "operator", "chain_hash": "a" * 64})
        data = _earlier_deny_entry(1)
        with store.transaction() as tx:
            tx.execute(
                "INSERT INTO audit_log (idx, entry, leaf_hash) VALUES (?, ?, ?)", (1, data, leaf_hash(data))
            )
        if checkpointed:  # signed as the earlier version signed it: over both entries' leaf hashes
            leaves = [
                leaf_hash(entry) for (entry,) in store.query("SELECT entry FROM audit_log ORDER BY idx")
            ]
            note = sign_checkpoint(Checkpoint(log.origin, 2, root_of(leaves)), key)
            with store.transaction() as tx:
                tx.execute(
                    "INSERT INTO audit_checkpoints (size, root, note, created) VALUES (?, ?, ?, ?)",
                    (2, root_of(leaves), note, "2026-11-29T23:20:22.000000Z"),
                )
    finally:
        store.close()
    return path, key


def test_an_earlier_entry_nested_past_the_bound_verifies_and_the_log_still_extends(tmp_path: Path) -> None:
    """An earlier version logged such an entry as canonical. Not yet covered by a checkpoint at
    the upgrade, it made `audit verify` report the log TAMPERED ("bytes written outside
    agentgate") and `audit checkpoint` refuse for ever: the log could no longer be extended."""
    path, key = _log_with_an_earlier_deep_entry(tmp_path, checkpointed=False)
    with SQLiteStore(path) as store:
        log = AuditLog(store, key)
        assert log.verify().problems == ()
        log.checkpoint()
        log.append({"kind": "revoke", "principal": "operator", "chain_hash": "b" * 64})
        log.checkpoint()
        report = log.verify()
        assert report.ok and report.size == 3


def test_an_earlier_entry_nested_past_the_bound_is_shown_and_explained(tmp_path: Path) -> None:
    """Covered by the earlier version's checkpoint, the log verified intact, yet `audit show`
    listed nothing (exit 2, "entry fields are invalid: ... nested more than 254 levels deep")
    and `audit explain 1` refused the entry."""
    path, key = _log_with_an_earlier_deep_entry(tmp_path, checkpointed=True)
    with SQLiteStore(path) as store:
        log = AuditLog(store, key)
        assert log.verify().ok
        assert [entry.kind for entry in log.entries()] == ["revoke", "deny"]
        assert log.explain(1).entry.args == {"doc": _deep(DEPTH)}


OLD_LEDGER = """
CREATE TABLE budget_ledger (
    grant_id TEXT PRIMARY KEY,
    cap INTEGER NOT NULL CHECK (cap >= 0),
    remaining INTEGER NOT NULL CHECK (remaining >= 0),
    spent INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE budget_reservations (
    id TEXT PRIMARY KEY,
    chain TEXT NOT NULL,
    amount INTEGER NOT NULL CHECK (amount >= 0),
    state TEXT NOT NULL CHECK (state IN ('reserved', 'committed', 'released')),
    actual INTEGER,
    created TEXT NOT NULL,
    settled TEXT
);
"""
"""The ledger's tables before 2026-11-29 19:12 (commit 6696a8f): reservations in a rowid table,
their ids random hex (uuid4) rather than time first."""


def test_a_reservation_held_in_an_earlier_rowid_ledger_is_settled_once_and_spent_stays_spent(
    tmp_path: Path,
) -> None:
    """ledger.py promises that stores made before reservations were WITHOUT ROWID keep their
    table and work: what was spent stays spent, a reservation held at the upgrade (a call in
    flight when the earlier process stopped) is settled exactly once, and new ones are taken."""
    path = tmp_path / "agentgate.db"
    with opened(path) as old:
        old.executescript(OLD_LEDGER)
        old.execute("INSERT INTO budget_ledger VALUES ('root', 100, 90, 7), ('tip', 10, 5, 2)")
        rows = [
            ("0f3c9a41b7d24e6f8a1c2b3d4e5f6071", '["root", "tip"]', 2, "committed", 2),
            ("9d2e7c1a0b3f4e5d6c7b8a9f0e1d2c3b", '["root", "tip"]', 3, "reserved", None),
            ("4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d", '["root"]', 5, "committed", 5),
        ]
        old.executemany(
            "INSERT INTO budget_reservations (id, chain, amount, state, actual, created) "
            "VALUES (?, ?, ?, ?, ?, '2026-11-29T18:00:00.000000Z')",
            rows,
        )
    with SQLiteStore(path) as store:
        ledger = BudgetLedger(store)
        assert (ledger.usage("root"), ledger.usage("tip")) == ((7, 3), (2, 3))
        held = "9d2e7c1a0b3f4e5d6c7b8a9f0e1d2c3b"
        assert ledger.commit(held, 1) == 0  # ran, cheaper than reserved: the rest comes back
        with pytest.raises(InputError, match="already settled"):
            ledger.release(held)
        assert (ledger.usage("root"), ledger.usage("tip")) == ((8, 0), (3, 0))
        fresh = ledger.reserve(None, ["root", "tip"], {"root": 100, "tip": 10}, 4)
        ledger.release(fresh)
        assert ledger.reservation(fresh).state == "released"
        assert ledger.remaining("tip") == 7 and ledger.remaining("root") == 92
        assert store.query(
            "SELECT sql LIKE '%WITHOUT ROWID%' FROM sqlite_master WHERE name = 'budget_reservations'"
        ) == [(0,)]  # the earlier table is kept as it was


def test_store_init_on_a_store_of_an_earlier_version_creates_only_what_it_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A store of 2026-11-29 23:16 (commit d5b04c6) lacks the tables later versions added; store
    init adds them, indexes the log's earlier entries, and changes no earlier row."""
    path = tmp_path / "agentgate.db"
    assert main(["store", "init", "--store", str(path)]) == 0
    later = [
        "agentgate_once",
        "approval_asked",
        "approval_grants",
        "audit_nodes",
        "audit_refs_built",
        "broker_writer",
    ]
    with SQLiteStore(path) as store:
        log = AuditLog(store, SigningKey.generate())
        allow = log.append({"kind": "allow", "principal": "did:key:zA", "resource": "tool:pay"})
        log.append(
            {
                "kind": "outcome",
                "principal": "did:key:zA",
                "resource": "tool:pay",
                "ref": allow,
                "status": "ok",
            }
        )
        with store.transaction() as tx:
            tx.execute("DROP TRIGGER audit_log_index_ref")
            for table in (*later, "audit_refs"):
                tx.execute(f"DROP TABLE {table}")
        before = store.query("SELECT idx, entry FROM audit_log ORDER BY idx")
    capsys.readouterr()
    assert main(["store", "init", "--store", str(path)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "audit log: ready"
    with SQLiteStore(path) as store:
        names = {name for (name,) in store.query("SELECT name FROM sqlite_master")}
        assert {*later, "audit_refs", "audit_log_index_ref"} <= names
        assert store.query("SELECT idx, ref FROM audit_refs") == [(1, 0)]
        assert store.query("SELECT idx, entry FROM audit_log ORDER BY idx") == before
