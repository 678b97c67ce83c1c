"""The lead's fixes of session sixteen (review R44's leftovers from R42/R43).

- A foreign SQLite file in rollback-journal mode holding a table of one of agentgate's names is
  refused before the first connection switches it to WAL mode (it was refused only after: the
  other application's file changed header and got -wal/-shm files beside it).
- A private key file owned by another user than the process's (root excepted) is refused: read
  only through root's right to read any file, its owner may rewrite it (R42 had accepted it).
- An approval that does not count says why in the approval_required answer and its entry.
- ``Gate.revoke_holder`` (R45's ``grant revoke --holder`` as a Gate method).
- Opening a second store on a file keeps the locks of the process's other connections: the first
  version of the rollback-mode check read the header through a descriptor of its own, whose close
  dropped them (CI: "database disk image is malformed" in a multi-process test).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from agentgate.cli.main import main
from agentgate.errors import StoreError
from agentgate.store import SQLiteStore


def _foreign(path: Path, script: str) -> bytes:
    db = sqlite3.connect(path)
    with db:
        db.executescript(script)
    db.close()
    assert path.read_bytes()[18] == 1  # a rollback journal, as most applications leave it
    return path.read_bytes()


@pytest.mark.parametrize("how", ["api", "store init"])
def test_a_foreign_rollback_mode_file_is_refused_before_it_is_switched_to_wal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str
) -> None:
    path = tmp_path / "app.db"
    data = _foreign(
        path, "CREATE TABLE audit_log (who TEXT, what TEXT); INSERT INTO audit_log VALUES ('a', 'b');"
    )
    if how == "api":
        with pytest.raises(StoreError, match=r"app\.db: it holds a table audit_log that is not agentgate's"):
            SQLiteStore(path)
    else:
        assert main(["store", "init", "--store", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "audit_log" in err and "not agentgate's" in err
    assert path.read_bytes() == data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db"]


def test_a_rollback_mode_file_of_agentgates_own_tables_opens(tmp_path: Path) -> None:
    # A store copied without its WAL mode (VACUUM INTO keeps the header of a fresh file) is
    # agentgate's all the same and opens, switched to WAL.
    source = tmp_path / "live.db"
    with SQLiteStore(source) as store:
        from agentgate.store.audit import create_audit_tables

        create_audit_tables(store)
    copy = tmp_path / "copy.db"
    db = sqlite3.connect(source)
    db.execute("VACUUM INTO ?", (str(copy),))
    db.close()
    if copy.read_bytes()[18] != 1:
        db = sqlite3.connect(copy)
        db.execute("PRAGMA journal_mode=DELETE")
        db.close()
    assert copy.read_bytes()[18] == 1
    with SQLiteStore(copy) as store:
        assert store.query("PRAGMA journal_mode")[0][0] == "wal"


def test_a_private_key_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    # Mode 0600 but another user's: readable here only by root's right to read any file, and its
    # owner may rewrite it. Refused, naming the owner; the process's own (or root's) is loaded.
    import os

    from agentgate.errors import KeyFileError
    from agentgate.keys import SigningKey, load_signing_key, save_key

    if os.geteuid() != 0:
        pytest.skip("only root can read a 0600 file of another user, or chown one")
    private, _public = save_key(SigningKey.generate(), tmp_path, "agent")
    assert load_signing_key(private).did
    os.chown(private, 4242, 4242)
    with pytest.raises(KeyFileError, match=r"owned by another user \(uid 4242\).*chown 0"):
        load_signing_key(private)
    os.chown(private, 0, 0)
    assert load_signing_key(private).did


def test_an_approval_that_does_not_count_says_why_in_the_answer_and_its_entry(
    tmp_path: Path,
) -> None:
    # R42 left it: a late vote for a request superseded by an edit was dropped in silence (quorum
    # above one), and the run was asked again with nothing said; quorum one refused it in words.
    import test_gate_leases_and_superseded as second

    from agentgate.gate import Approval
    from agentgate.keys import SigningKey

    with SQLiteStore(tmp_path / "s.db") as store:
        made = second.Approvals(store)
        try:
            first = made.ask(500, "memo", "v1")
            made.ask(900, "memo", "v2")  # the edit closes the first request
            late = Approval.sign(first.approval_payload(), made.keys["lead2"])
            again = made.ask(500, "memo", "v1", approval=late)
            assert again.needs_approval
            (note,) = [r for r in again.reasons if "not counted" in r]
            assert made.keys["lead2"].did in note and "superseded" in note
            stranger = Approval.sign(again.approval_payload(), SigningKey.generate())
            asked = made.ask(500, "memo", "v1", approval=stranger)
            assert "approval not counted: its approver is not one of this call's approvers" in asked.reasons
            entry = made.entries()[asked.audit_index or 0]
            assert entry.kind == "approval_required" and any("not counted" in r for r in entry.reasons)
        finally:
            made.gate.close()


def test_gate_revoke_holder_cuts_every_recorded_grant_of_a_key_with_its_entries(tmp_path: Path) -> None:
    # R45's --holder, as a Gate method: each grant revoked has its revoke entry, in one transaction.
    import test_gate_leases_and_superseded as second

    from agentgate.capabilities import Call
    from agentgate.keys import SigningKey

    with SQLiteStore(tmp_path / "s.db") as store:
        made = second.Approvals(store)
        try:
            gate = made.gate
            again = gate.issue(made.keys["root"], name="agent", key=made.keys["agent"], role="worker")
            other = SigningKey.generate()
            done = gate.revoke_holder(made.keys["agent"].public, reason="key leaked")
            assert sorted(done.revoked) == sorted({made.agent.grant_id, again.grant_id})
            assert done.already == ()
            for identity in (made.agent, again):
                refused = gate.authorize(identity, Call.tool("pay", {"amount": 1}))
                assert not refused.allowed and "revoked" in " ".join(refused.reasons)
            revokes = [e for e in made.entries() if e.kind == "revoke"]
            assert len(revokes) == 2 and all("key leaked" in " ".join(e.reasons) for e in revokes)
            assert gate.revoke_holder(made.keys["agent"].did).revoked == ()  # nothing new
            assert gate.revoke_holder(other.public).revoked == ()
            assert gate.verify().ok
        finally:
            made.gate.close()


def test_opening_a_second_store_on_a_file_keeps_the_locks_of_the_first(tmp_path: Path) -> None:
    # The first fix above read the file's header through a file descriptor of its own: closing it
    # dropped every POSIX lock the process held on the file, the shared lock of a Gate's open
    # connections included. Another process's last connection then took the file for its own
    # (it checkpoints and removes the WAL when it thinks no other is open), under the ones still
    # open here: "database disk image is malformed", seen in CI's multi-process audit test. The
    # journal mode is now read through SQLite, which keeps its locks across its connections.
    import subprocess
    import sys

    path = tmp_path / "s.db"
    with SQLiteStore(path) as first:
        with first.transaction() as tx:
            tx.execute("CREATE TABLE t (x)")
        conn = first.connect()
        conn.execute("BEGIN")
        conn.execute("SELECT COUNT(*) FROM t").fetchall()  # a reader, holding its shared lock
        try:
            SQLiteStore(path).close()  # a second store on the file, in this process
            # Leaving WAL mode needs the file to itself: refused while the reader is there.
            probe = (
                "import sqlite3, sys; c = sqlite3.connect(sys.argv[1], timeout=0, isolation_level=None); "
                "print(c.execute('PRAGMA journal_mode=DELETE').fetchone()[0])"
            )
            other = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True)
            assert other.returncode != 0 and "locked" in other.stderr, (other.stdout, other.stderr)
        finally:
            conn.execute("ROLLBACK")
            conn.close()
