"""``agentgate audit``: show, explain, prove, verify-proof, checkpoint and report."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from agentgate.cli.main import main
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog, open_log_key


def audit_cli_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The audit verbs alone, on a new SQLite file that ``AGENTGATE_STORE`` names (no log key or
    origin from the environment); the file's path."""
    monkeypatch.setattr("agentgate.cli.main.GROUPS", ("agentgate.cli.audit",))
    monkeypatch.delenv("AGENTGATE_LOG_KEY", raising=False)
    monkeypatch.delenv("AGENTGATE_LOG_ORIGIN", raising=False)
    db = tmp_path / "agentgate.db"
    monkeypatch.setenv("AGENTGATE_STORE", str(db))
    return db


@pytest.fixture
def populated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    db = audit_cli_store(tmp_path, monkeypatch)
    with SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store))
        for i in range(6):
            who = "did:key:zAlice" if i % 2 else "did:key:zBob"
            index = log.append(
                {"kind": "allow", "principal": who, "resource": "tool:search", "budget_delta": 10}
            )
            log.append(
                {
                    "kind": "spend",
                    "principal": who,
                    "resource": "tool:search",
                    "budget_delta": 7,
                    "ref": index,
                }
            )
        log.append(
            {
                "kind": "deny",
                "principal": "did:key:zBob",
                "resource": "tool:run_shell",
                "reasons": ["no grant"],
            }
        )
    return tmp_path


def test_show_filters_and_prints_json(populated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "show", "--principal", "did:key:zBob", "--tool", "run_shell", "--json"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["kind"] == "deny"
    assert main(["audit", "show", "--kind", "spend"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 6


def test_explain_prints_the_entry_and_its_outcome(
    populated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["audit", "explain", "0"]) == 0
    out = capsys.readouterr().out
    assert "principal: did:key:zBob" in out and "related entry 1: spend" in out
    assert main(["audit", "explain", "999"]) == 2


def test_prove_then_verify_proof_offline(populated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    proof = populated / "entry.tlog-proof"
    assert main(["audit", "prove", "12", "--out", str(proof)]) == 0
    pub = populated / "log.pub"
    assert main(["audit", "verify-proof", str(proof), "--key", str(pub)]) == 0
    assert "entry 12 (deny" in capsys.readouterr().out
    proof.write_text(proof.read_text().replace("index 12", "index 11"))
    assert main(["audit", "verify-proof", str(proof), "--key", str(pub)]) == 1
    assert main(["audit", "verify-proof", str(populated / "missing"), "--key", str(pub)]) == 2


@pytest.mark.parametrize(
    "malformed",
    [
        pytest.param(lambda lines: [*lines[:2], "index twelve", *lines[3:]], id="index-not-a-number"),
        pytest.param(lambda lines: [lines[0], *lines[2:]], id="no-entry"),
        pytest.param(lambda lines: [lines[0], "extra bm90IGpzb24=", *lines[2:]], id="entry-not-json"),
        pytest.param(lambda lines: [lines[0], "extra eyJ2IjoxfQ==", *lines[2:]], id="entry-wrong-fields"),
        pytest.param(lambda lines: [*lines[:3], "not base64!", *lines[3:]], id="hash-not-base64"),
        pytest.param(lambda lines: [ln for ln in lines if ln != "13"], id="checkpoint-without-size"),
    ],
)
def test_verify_proof_refuses_a_malformed_bundle_as_unusable_input(
    populated: Path, capsys: pytest.CaptureFixture[str], malformed: Any
) -> None:
    """Review R54: ``audit verify-proof`` answered a malformed bundle (its entry not JSON or
    without an entry's fields, no index, a hash line or checkpoint body it cannot read) with
    INVALID, exit 1, as if the log had been caught lying. Rule: a file that is no well-formed
    bundle is unusable input, exit 2 with one line naming FILE and what is wrong; a well-formed
    bundle whose proof does not verify stays INVALID (exit 1, test_prove_then_verify_proof_offline)."""
    proof, pub = populated / "entry.tlog-proof", populated / "log.pub"
    assert main(["audit", "prove", "12", "--out", str(proof)]) == 0
    proof.write_text("\n".join(malformed(proof.read_text().split("\n"))))
    capsys.readouterr()
    assert main(["audit", "verify-proof", str(proof), "--key", str(pub)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"agentgate: error: {proof}: not a well-formed proof bundle: ")
    assert captured.err.count("\n") == 1, captured.err


def test_report_is_one_self_contained_page(populated: Path) -> None:
    out = populated / "report.html"
    assert main(["audit", "checkpoint"]) == 0
    assert main(["audit", "report", "--out", str(out)]) == 0
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page and "Budget burn-down" in page
    assert "did:key:zAlice</code>: 21 spent" in page
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "<script" not in page and "<link" not in page


def test_verify_with_another_key_names_both_key_ids_and_stays_tampered(
    populated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R54: ``audit verify --key`` with another key's ``log.pub`` reported every stored
    checkpoint as a forgery and nothing more. Rule: when no stored checkpoint verifies and all are
    signed by one other key, a line says the likelier cause, a wrong key, naming both key ids;
    the verdict stays TAMPERED, exit 1 (replacing every checkpoint looks the same). One forged
    checkpoint among good ones gets no such line."""
    from agentgate.audit.note import Checkpoint, key_id, sign_checkpoint
    from agentgate.keys import SigningKey

    assert main(["audit", "checkpoint"]) == 0
    with SQLiteStore(populated / "agentgate.db") as store:
        AuditLog(store, open_log_key(store)).append({"kind": "deny", "principal": "did:key:zBob"})
    assert main(["audit", "checkpoint"]) == 0
    origin = "agentgate.local/audit"
    with SQLiteStore(populated / "agentgate.db") as store:
        ours = open_log_key(store).public
    other = SigningKey(b"\x42" * 32).public
    capsys.readouterr()
    assert main(["audit", "verify", "--key", other.did]) == 1
    out = capsys.readouterr().out
    assert out.startswith("TAMPERED: 2 problem(s)\nlikely cause: none of the 2 stored checkpoint(s) ")
    assert f"(key id {key_id(origin, other).hex()})" in out
    assert f"signed by one other key (key id {key_id(origin, ours).hex()})" in out
    with SQLiteStore(populated / "agentgate.db") as store, store.transaction() as tx:
        forged = sign_checkpoint(Checkpoint(origin, 1, b"\x01" * 32), SigningKey(b"\x43" * 32))
        tx.execute(
            "INSERT INTO audit_checkpoints (size, root, note, created) VALUES (1, ?, ?, 'x')",
            (b"\x01" * 32, forged),
        )
    assert main(["audit", "verify", "--key", ours.did]) == 1
    assert "likely cause" not in capsys.readouterr().out


def test_verify_without_a_log_key_needs_one_only_for_a_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store with no checkpoint has no signature to check: verified without a key (review R71;
    exit 2 before); one with a checkpoint needs the key (tests/test_cli_audit_r71_empty_store_no_key.py)."""
    monkeypatch.setattr("agentgate.cli.main.GROUPS", ("agentgate.cli.audit",))
    SQLiteStore(tmp_path / "empty.db").close()
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "empty.db"))
    monkeypatch.delenv("AGENTGATE_LOG_KEY", raising=False)
    assert main(["audit", "verify"]) == 0
    assert main(["audit", "verify", "--checkpoint", str(tmp_path / "none.note")]) == 2


def test_a_mistyped_store_is_refused_not_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every audit verb reads an existing log: a path with no store is an error naming it, and
    nothing (no database, no log key) is created there, not even by ``checkpoint``."""
    monkeypatch.setattr("agentgate.cli.main.GROUPS", ("agentgate.cli.audit",))
    typo = tmp_path / "typo" / "agentgate.db"
    monkeypatch.setenv("AGENTGATE_STORE", str(typo))
    monkeypatch.delenv("AGENTGATE_LOG_KEY", raising=False)
    for verb in (["verify"], ["show"], ["checkpoint"], ["report", "--out", str(tmp_path / "r.html")]):
        assert main(["audit", *verb]) == 2
        assert f"no store at {typo}" in capsys.readouterr().err
    assert not typo.parent.exists()


def _shown(capsys: pytest.CaptureFixture[str], *args: str) -> list[tuple[int, str]]:
    assert main(["audit", "show", "--json", *args]) == 0
    return [(e["index"], e["kind"]) for e in map(json.loads, capsys.readouterr().out.splitlines())]


def test_show_last_and_from_select_a_window(populated: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 13 entries: allow/spend pairs 0..11, then the deny at 12.
    assert _shown(capsys, "--last", "3") == [(10, "allow"), (11, "spend"), (12, "deny")]
    assert _shown(capsys, "--from", "11") == [(11, "spend"), (12, "deny")]
    assert _shown(capsys, "--from", "4", "--last", "20") == [
        (i, "allow" if i % 2 == 0 else "spend") for i in range(4, 12)
    ] + [(12, "deny")]
    # With a filter, --last counts the entries that match, not the newest entries of the log.
    assert _shown(capsys, "--kind", "allow", "--last", "2") == [(8, "allow"), (10, "allow")]
    assert _shown(capsys, "--kind", "allow", "--from", "3", "--last", "9") == [
        (4, "allow"),
        (6, "allow"),
        (8, "allow"),
        (10, "allow"),
    ]
    assert _shown(capsys, "--last", "0") == []
    assert _shown(capsys, "--from", "13") == []


@pytest.mark.parametrize(
    "given", [["--last", "-1"], ["--last", "x"], ["--from", "1e3"], ["--from", "99999999999999999999"]]
)
def test_show_refuses_a_window_that_is_no_index(
    populated: Path, capsys: pytest.CaptureFixture[str], given: list[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["audit", "show", *given])
    assert exit_.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


def test_explain_shows_the_grant_chain_when_the_grant_store_has_it(
    populated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentgate.store.grants import GrantRepository

    db = populated / "agentgate.db"
    with SQLiteStore(db) as store:
        grants = GrantRepository(store)
        grants.record_grants(
            [
                ("g-root", None, "did:key:zAnchor", "did:key:zBoss", 2_000_000_000, "t1"),
                ("g-child", "g-root", "did:key:zBoss", "did:key:zAlice", 1_900_000_000, "t2"),
            ],
            now=1,
        )
        grants.revoke("g-root", now=2)
        grants.close()
        log = AuditLog(store, open_log_key(store))
        index = log.append({"kind": "allow", "principal": "did:key:zAlice", "chain_hash": "g-child"})
    assert main(["audit", "explain", str(index)]) == 0
    out = capsys.readouterr().out
    assert "grant g-root: did:key:zAnchor -> did:key:zBoss (REVOKED, expires 2033-05-18T03:33:20Z)" in out
    # R45: the expiry as every human output shows a time (docs/cli.md, Output conventions)
    # R55: a link below a revoked one is revoked through it (the cascade), its expiry kept
    assert (
        "grant g-child: did:key:zBoss -> did:key:zAlice (revoked through grant g-root..., expires 2030-03-17T17:46:40Z)"
        in out
    )
    assert out.index("grant g-root:") < out.index("grant g-child:")


def test_explain_shows_the_chains_constraints_and_says_where_the_chain_comes_from(
    populated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R54: ``audit explain`` showed no grant's constraints (docs/cli.md said it did), and
    its chain came from the grant store, which the log does not sign, with nothing saying so: a
    row edited there (another audience) was shown as the authority behind the entry. Rule: the
    chain is shown from the token the store keeps, with each link's capabilities, once its tip
    hashes to the entry's chain hash and every link is signed by its issuer ("bound"); a chain
    that is not is marked NOT bound, its constraints not shown; either way the output names the
    grant store as the source."""
    from agentgate.authority import delegate, issue, record
    from agentgate.keys import SigningKey
    from agentgate.store.grants import GrantRepository

    anchor, boss, alice = (SigningKey(bytes([n]) * 32) for n in (1, 2, 3))
    root = issue(anchor, boss.public, ["tool:payments.refund?amount<=500&currency=EUR|USD"], ttl=3600)
    child = delegate(root, boss, alice.public, ["tool:payments.refund?amount<=100&currency=EUR"], ttl=600)
    other = issue(anchor, alice.public, ["tool:search"], ttl=3600)
    with SQLiteStore(populated / "agentgate.db") as store:
        grants = GrantRepository(store)
        record(grants, child)
        record(grants, other)
        grants.close()
        log = AuditLog(store, open_log_key(store))
        index = log.append({"kind": "allow", "principal": alice.public.did, "chain_hash": child.id})
        with store.transaction() as tx:
            tx.execute("UPDATE agentgate_grants SET audience = 'did:key:zMallory' WHERE id = ?", (child.id,))
    assert main(["audit", "explain", str(index)]) == 0
    out = capsys.readouterr().out
    assert "source: the grant store (not signed by the audit log); bound to this entry" in out
    assert f"grant {child.id[:24]}: {boss.public.did} -> {alice.public.did} (expires " in out
    assert "allow tool:payments.refund?amount<=500&currency=EUR|USD" in out
    assert "allow tool:payments.refund?amount<=100&currency=EUR" in out
    assert out.index("amount<=500") < out.index("amount<=100") and "zMallory" not in out
    with SQLiteStore(populated / "agentgate.db") as store, store.transaction() as tx:
        tx.execute("UPDATE agentgate_grants SET token = ? WHERE id = ?", (other.token, child.id))
    assert main(["audit", "explain", str(index)]) == 0
    out = capsys.readouterr().out
    assert "NOT bound to this entry (its token's tip is grant " in out
    assert "constraints not shown" in out and "allow tool:" not in out
    assert "-> did:key:zMallory (expires " in out  # the store's word, and said to be


@pytest.mark.parametrize(
    "expires", ["'soon'", "1e400", "x'00'", "2.5"], ids=["text", "infinity", "bytes", "fraction"]
)
def test_explain_shows_a_grant_row_whose_expiry_is_no_time_without_a_traceback(
    populated: Path, capsys: pytest.CaptureFixture[str], expires: str
) -> None:
    """Kills: ``_grant_chain`` converting each row's ``expires`` with ``int()`` (``ValueError`` for
    text, ``OverflowError`` for the infinity SQLite stores for 1e400): ``audit explain`` ended in a
    traceback when the grant store held a row edited in the database. Rule: the grant store is no
    evidence (the entry is), and explain shows what it holds: an expiry that is no time as ``-``,
    exit 0; a whole or fractional number of seconds as a time."""
    from agentgate.store.grants import GrantRepository

    db = populated / "agentgate.db"
    with SQLiteStore(db) as store:
        grants = GrantRepository(store)
        grants.record_grants(
            [("g-edited", None, "did:key:zAnchor", "did:key:zAlice", 2_000_000_000, "t")], now=1
        )
        grants.close()
        with store.transaction() as tx:
            tx.execute(f"UPDATE agentgate_grants SET expires = {expires} WHERE id = 'g-edited'")
        index = AuditLog(store, open_log_key(store)).append(
            {"kind": "allow", "principal": "did:key:zAlice", "chain_hash": "g-edited"}
        )
    assert main(["audit", "explain", str(index)]) == 0
    shown = "1970-01-01T00:00:02Z" if expires == "2.5" else "-"
    assert f"grant g-edited: did:key:zAnchor -> did:key:zAlice (expires {shown})" in capsys.readouterr().out


@pytest.mark.parametrize("target", ["symlink", "no-directory", "directory"])
def test_checkpoint_out_that_cannot_be_written_signs_nothing(
    populated: Path, capsys: pytest.CaptureFixture[str], target: str
) -> None:
    """Kills: ``audit checkpoint --out FILE`` signing and storing a checkpoint before finding out
    that FILE cannot be written (``_write`` refuses a symbolic link, a directory; no directory to
    write it in). With FILE a symbolic link to the saved checkpoint, ``_saved`` read no
    checkpoint there (not a regular file), so the check that the log extends it was skipped: a
    database restored from an older copy and grown again was signed over (exit 2 all the same),
    and ``audit verify`` without ``--checkpoint`` then said intact. Rule: a FILE that ``--out``
    cannot replace is refused first (exit 2, one line), nothing signed or stored."""
    import sqlite3

    db = populated / "agentgate.db"
    saved = populated / "saved.cp"
    assert main(["audit", "checkpoint", "--out", str(saved)]) == 0
    older = populated / "older.db"
    source, copy = sqlite3.connect(db), sqlite3.connect(older)
    source.backup(copy)
    copy.close()
    source.close()
    with SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store))
        log.append({"kind": "allow", "principal": "did:key:zAlice", "resource": "tool:wire"})
        assert main(["audit", "checkpoint", "--out", str(saved)]) == 0
    older.replace(db)  # restored from the older copy, then grown by two entries of its own
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    with SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store))
        for _ in range(2):
            log.append({"kind": "deny", "principal": "did:key:zMallory", "resource": "tool:wire"})
        stored = store.query("SELECT COUNT(*) FROM audit_checkpoints")[0][0]
    out = {
        "symlink": populated / "link.cp",
        "no-directory": populated / "missing" / "saved.cp",
        "directory": populated / "a-directory",
    }[target]
    if target == "symlink":
        out.symlink_to(saved)
    elif target == "directory":
        out.mkdir()
    capsys.readouterr()
    assert main(["audit", "checkpoint", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"agentgate: error: {out}: cannot write: ") and len(err.splitlines()) == 1
    with SQLiteStore(db) as store:
        assert store.query("SELECT COUNT(*) FROM audit_checkpoints")[0][0] == stored  # nothing signed
    assert main(["audit", "verify", "--checkpoint", str(saved)]) == 1


def test_prove_out_that_cannot_be_written_signs_no_checkpoint(
    populated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Kills: ``audit prove INDEX --out FILE`` signing and storing a fresh checkpoint (the log has
    grown since the last) before finding out that FILE cannot be written. Rule: a command that
    fails stores nothing: FILE is refused first (exit 2, one line)."""
    db = populated / "agentgate.db"
    out = populated / "missing" / "entry.tlog-proof"
    assert main(["audit", "prove", "0", "--out", str(out)]) == 2
    assert capsys.readouterr().err.startswith(f"agentgate: error: {out}: cannot write: no directory")
    with SQLiteStore(db) as store:
        assert store.query("SELECT COUNT(*) FROM audit_checkpoints")[0][0] == 0


@pytest.mark.parametrize("verb", ["checkpoint", "prove", "report"])
@pytest.mark.parametrize("named", ["agentgate.db", "agentgate.db-wal", "log.key", "log.pub"])
def test_out_naming_the_store_or_the_log_key_replaces_neither(
    populated: Path, capsys: pytest.CaptureFixture[str], verb: str, named: str
) -> None:
    """Kills: ``--out`` replacing whatever regular file it names. ``audit report --out
    agentgate.db`` replaced the audit log's own database with the HTML page, ``audit checkpoint
    --out log.key`` and ``audit prove 0 --out log.key`` the private log key with a signed note
    (exit 0, "wrote ..."): a slip of tab completion destroyed the evidence or the key that signs
    it. Rule: ``--out`` naming a file the command reads (the SQLite database, its write-ahead
    log, the log key or ``log.pub`` beside it), however the path is spelled, is refused first:
    exit 2, one line, the file as it was, nothing signed."""
    db = populated / "agentgate.db"
    with SQLiteStore(db) as store:
        (populated / "log.pub").write_text(open_log_key(store).public.did + "\n")
    target = populated / named
    if not target.exists():
        target.write_bytes(b"")
    (populated / "sub").mkdir()
    spelled = f"{populated}/sub/../{named}"
    before = target.read_bytes()
    args = {"checkpoint": ["checkpoint"], "prove": ["prove", "0"], "report": ["report"]}[verb]
    capsys.readouterr()
    assert main(["audit", *args, "--out", spelled]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"agentgate: error: {spelled}: cannot write: ") and len(err.splitlines()) == 1
    if named.startswith("log."):
        assert target.read_bytes() == before
    with SQLiteStore(db) as store:  # the database and its write-ahead log: still the log
        assert store.query("SELECT COUNT(*) FROM audit_log")[0][0] == 13
        assert store.query("SELECT COUNT(*) FROM audit_checkpoints")[0][0] == 0


@pytest.mark.parametrize("held", ["crlf-copy", "over-64-kib", "notes"])
def test_checkpoint_out_refuses_a_file_that_holds_no_checkpoint(
    populated: Path, capsys: pytest.CaptureFixture[str], held: str
) -> None:
    """Kills: ``audit checkpoint --out FILE`` read FILE as "no checkpoint saved" whenever it could
    not parse one there (a copy of the saved checkpoint whose line breaks a transfer turned into
    CRLF, a file over the 64 KiB a checkpoint file may hold, any other file) and replaced it
    without comparing anything: the saved checkpoint, the evidence a rollback is caught with,
    gone. Rule: exit 2, one line naming FILE and why, FILE unchanged, nothing signed."""
    saved = populated / "saved.cp"
    assert main(["audit", "checkpoint", "--out", str(saved)]) == 0
    body = {
        "crlf-copy": saved.read_bytes().replace(b"\n", b"\r\n"),
        "over-64-kib": saved.read_bytes() + b"#" * (64 << 10),
        "notes": b"audit notes: checkpoints go to the bucket on Fridays\n",
    }[held]
    out = populated / "kept.cp"
    out.write_bytes(body)
    with SQLiteStore(populated / "agentgate.db") as store:
        stored = store.query("SELECT COUNT(*) FROM audit_checkpoints")[0][0]
    capsys.readouterr()
    assert main(["audit", "checkpoint", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"agentgate: error: {out}: ") and len(err.splitlines()) == 1
    assert out.read_bytes() == body
    with SQLiteStore(populated / "agentgate.db") as store:
        assert store.query("SELECT COUNT(*) FROM audit_checkpoints")[0][0] == stored


def test_checkpoint_out_writes_over_an_empty_file(populated: Path) -> None:
    """An empty FILE (made by ``touch`` or ``mktemp``) holds nothing to lose: it is written."""
    out = populated / "empty.cp"
    out.touch()
    assert main(["audit", "checkpoint", "--out", str(out)]) == 0
    assert main(["audit", "verify", "--checkpoint", str(out)]) == 0


def test_checkpoint_refusing_a_tampered_log_creates_no_log_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Kills: ``audit checkpoint`` on a log with no checkpoint yet created ``log.key`` and
    ``log.pub`` first, then found an entry edited and refused (exit 1): the failed command left
    a key behind, which the next checkpoint (of the log as it is then) would sign with. Rule: a
    command that fails writes nothing."""
    from agentgate.keys import SigningKey

    db = audit_cli_store(tmp_path, monkeypatch)
    with SQLiteStore(db) as store:
        log = AuditLog(store, SigningKey.generate())  # appends need no log key; none is saved
        for i in range(3):
            log.append({"kind": "allow", "principal": "did:key:zAlice", "budget_delta": i})
        with store.transaction() as tx:
            tx.execute("DROP TRIGGER IF EXISTS audit_log_no_update")
            tx.execute("UPDATE audit_log SET entry = CAST(? AS BLOB) WHERE idx = 1", (b"{}",))
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["audit", "checkpoint"]) == 1
    assert "REFUSED" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert not (tmp_path / "log.key").exists() and not (tmp_path / "log.pub").exists()


@pytest.mark.parametrize("name", ["log.key", "log.pub"])
def test_checkpoint_out_naming_the_log_key_it_would_create_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """Kills: on a log with no key yet, ``checkpoint --out log.pub`` created the key pair, then
    found FILE to be the public key just made (exit 2), leaving the pair behind. Rule: an
    ``--out`` naming the key (or ``log.pub``) it would create is refused before anything is made."""
    db = audit_cli_store(tmp_path, monkeypatch)
    with SQLiteStore(db) as store:
        AuditLog(store, open_log_key(store, create=True)).append({"kind": "deny", "principal": "did:key:zA"})
    for made in ("log.key", "log.pub"):
        (tmp_path / made).unlink()
    capsys.readouterr()
    assert main(["audit", "checkpoint", "--out", str(tmp_path / name)]) == 2
    assert f"it is the log{'' if name == 'log.key' else chr(39) + 's public'} key" in capsys.readouterr().err
    assert not (tmp_path / "log.key").exists() and not (tmp_path / "log.pub").exists()


@pytest.mark.parametrize("hostile", ["another key", "another origin", "size edited", "trailing text"])
def test_verify_refuses_a_saved_checkpoint_that_is_not_this_logs_as_unusable_input(
    hostile: str, populated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R54: ``audit verify --checkpoint FILE`` with a FILE that is no checkpoint of this
    log (signed by another key, for another origin, its size edited, text after its signature)
    said ``TAMPERED`` (exit 1) of a log nothing had touched. Rule: the saved checkpoint is the
    caller's input; one that does not open under the log's key is unusable input (exit 2, one
    line naming FILE and why), and tampering (exit 1) is said only of what the log holds."""
    from agentgate.audit.note import Checkpoint, sign_checkpoint
    from agentgate.keys import SigningKey

    assert main(["audit", "checkpoint", "--out", str(populated / "good.cp")]) == 0
    good = (populated / "good.cp").read_text()
    body = Checkpoint.parse(good.partition("\n\n")[0] + "\n")
    saved = {
        "another key": sign_checkpoint(body, SigningKey(b"\x05" * 32)),
        "another origin": sign_checkpoint(
            Checkpoint("other.example/log", body.size, body.root), SigningKey(b"\x05" * 32)
        ),
        "size edited": good.replace(f"\n{body.size}\n", f"\n{body.size + 1}\n", 1),
        "trailing text": good + "appended\n",
    }[hostile]
    (populated / "saved.cp").write_text(saved)
    capsys.readouterr()
    assert main(["audit", "verify", "--checkpoint", str(populated / "saved.cp")]) == 2
    out, err = capsys.readouterr()
    assert "TAMPERED" not in out and "intact" not in out
    assert err.startswith(
        f"agentgate: error: {populated / 'saved.cp'}: not a checkpoint of this log signed by its key: "
    )
    assert len(err.splitlines()) == 1
    assert main(["audit", "verify", "--checkpoint", str(populated / "good.cp")]) == 0


def _tables(db: Path) -> set[str]:
    """The names of the tables, indexes and triggers in the SQLite file ``db``, read without
    opening it as a store."""
    raw = sqlite3.connect(db)
    try:
        return {row[0] for row in raw.execute("SELECT name FROM sqlite_master")}
    finally:
        raw.close()


def _drop_the_log(db: Path) -> None:
    raw = sqlite3.connect(db)
    raw.execute("DROP TABLE audit_log")  # its triggers go with it
    raw.execute("DROP TABLE audit_checkpoints")
    raw.commit()
    raw.close()


def test_a_dropped_log_is_tampered_and_no_verb_makes_it_anew(
    populated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R55: dropping audit_log and audit_checkpoints gave ``audit verify`` "intact: 0
    entries" (exit 0), and verify, show, explain and prove made the tables anew, empty. Rule: the
    store records that its log was made, so a dropped log is TAMPERED (exit 1) for verify, a
    refusal for the other verbs (exit 2; checkpoint's REFUSED, exit 1), and nothing is created."""
    db = populated / "agentgate.db"
    assert main(["audit", "checkpoint"]) == 0
    _drop_the_log(db)
    before = _tables(db)
    capsys.readouterr()
    assert main(["audit", "verify"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("TAMPERED: 1 problem(s)\n") and "the audit log was dropped from this store" in out
    for argv in (["show"], ["explain", "0"], ["prove", "0", "--out", str(populated / "p")]):
        assert main(["audit", *argv]) == 2, argv
        assert "the audit log was dropped" in capsys.readouterr().err, argv
    assert main(["audit", "checkpoint"]) == 1
    assert capsys.readouterr().out.startswith("REFUSED: the audit log was dropped")
    assert _tables(db) == before and not {"audit_log", "audit_checkpoints"} & before
    assert not (populated / "p").exists()


def test_a_store_where_no_log_was_made_reads_as_empty_and_reading_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R55: the verbs that only read made the log's tables in a store that had none (the
    grants part's alone, as grant commands leave it). Rule: no log yet is intact and empty (exit
    0, said so), explain and prove find no entry (exit 2), nothing is created; checkpoint then
    starts the log, as docs/cli.md says."""
    from agentgate.store.grants import GRANTS_DDL

    db = audit_cli_store(tmp_path, monkeypatch)
    with SQLiteStore(db) as store:
        store.ensure_schema("grants", GRANTS_DDL)
        open_log_key(store)  # a log key, as a first checkpoint makes it
    before = _tables(db)
    assert main(["audit", "verify"]) == 0
    assert (
        capsys.readouterr().out == "intact: 0 entries (no audit log in this store yet; nothing was created)\n"
    )
    assert main(["audit", "show", "--json"]) == 0
    shown = capsys.readouterr()
    assert shown.out == "" and "no audit log in this store yet" in shown.err
    for argv in (["explain", "0"], ["prove", "0", "--out", str(tmp_path / "p")]):
        assert main(["audit", *argv]) == 2, argv
        assert "audit log has only 0 entries; entry 0 is past its end" in capsys.readouterr().err
    assert main(["audit", "report", "--out", str(tmp_path / "r.html")]) == 0
    assert _tables(db) == before and "audit_log" not in before
    assert main(["audit", "checkpoint"]) == 0
    capsys.readouterr()
    assert main(["audit", "verify"]) == 0
    assert capsys.readouterr().out.startswith("intact: 0 entries, root ")
    assert {"audit_log", "audit_checkpoints", "agentgate_store_parts"} <= _tables(db)


def test_a_saved_checkpoint_of_entries_is_not_met_by_a_store_with_no_log(
    populated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R55: a log dropped together with the store's record of it reads as no log yet;
    the checkpoint saved outside the database still catches it (exit 1)."""
    saved = populated / "saved.note"
    assert main(["audit", "checkpoint", "--out", str(saved)]) == 0
    db = populated / "agentgate.db"
    _drop_the_log(db)
    raw = sqlite3.connect(db)
    raw.execute("DROP TABLE agentgate_store_parts")
    raw.commit()
    raw.close()
    capsys.readouterr()
    assert main(["audit", "verify", "--checkpoint", str(saved)]) == 1
    out = capsys.readouterr().out
    assert "the saved checkpoint signs 13 entries, and this store holds no audit log" in out
    assert "audit_log" not in _tables(db)


def test_show_lists_an_index_two_rows_hold_once_and_names_it_as_verify_does(
    populated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R55: in an audit_log rebuilt without its primary key, a second row of index 5 was
    listed by ``audit show`` as a second entry 5, while verify reads one and names the index as
    tampering; ``AuditLog.size`` counted rows, so ``show --last 3`` started one late (two entries
    shown). Rule: show lists each index once and names the repeated one on standard error, in
    verify's words; size counts indexes."""
    db = populated / "agentgate.db"
    raw = sqlite3.connect(db)
    raw.executescript(
        "CREATE TABLE bare (idx INTEGER, entry BLOB, leaf_hash BLOB);"
        "INSERT INTO bare SELECT idx, entry, leaf_hash FROM audit_log;"
        "DROP TABLE audit_log; ALTER TABLE bare RENAME TO audit_log;"
        "INSERT INTO audit_log SELECT idx, entry, leaf_hash FROM audit_log WHERE idx = 5;"
    )
    raw.close()
    named = "entry 5: 2 rows hold this index, which one entry has: rows inserted outside agentgate"
    assert main(["audit", "show", "--json"]) == 0
    shown = capsys.readouterr()
    assert [json.loads(line)["index"] for line in shown.out.splitlines()] == list(range(13))
    assert named in shown.err
    assert main(["audit", "show", "--last", "3", "--json"]) == 0
    assert [json.loads(line)["index"] for line in capsys.readouterr().out.splitlines()] == [10, 11, 12]
    with SQLiteStore(db) as store:
        assert AuditLog(store, open_log_key(store)).size() == 13
    assert main(["audit", "verify"]) == 1
    assert named in capsys.readouterr().out


def test_verify_says_a_log_without_a_checkpoint_is_unsigned(
    populated: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R55: ``audit verify`` said "intact: 13 entries" for a log that no checkpoint signs,
    although only the database's triggers keep it (docs/operations.md). Rule: the verdict says
    it is unsigned, still starting "intact: N entries" and exit 0; once signed, it says nothing more."""
    assert main(["audit", "verify"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("intact: 13 entries, root ") and out.endswith(
        ", 0 checkpoints (unsigned: no checkpoint yet, protected only by the database's triggers)\n"
    )
    assert main(["audit", "checkpoint"]) == 0
    capsys.readouterr()
    assert main(["audit", "verify"]) == 0
    assert capsys.readouterr().out.endswith(", 1 checkpoint\n")


def test_grant_revoke_on_a_dropped_log_is_refused_and_makes_no_log(
    populated: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R55: ``grant revoke`` on a store whose audit log was dropped wrote its ``revoke``
    entry at index 0 of a log made anew. Rule: refused (exit 2, the dropped log named), no
    revocation and no log table written."""
    monkeypatch.setattr("agentgate.cli.main.GROUPS", ("agentgate.cli.audit", "agentgate.cli.grant"))
    db = populated / "agentgate.db"
    _drop_the_log(db)
    capsys.readouterr()
    assert main(["grant", "revoke", "ab" * 32]) == 2
    assert "the audit log was dropped from this store" in capsys.readouterr().err
    assert not {"audit_log", "audit_checkpoints"} & _tables(db)
    with SQLiteStore(db) as store:
        assert store.query("SELECT COUNT(*) FROM agentgate_revocations") == [(0,)]
