"""The audit log and its evidence, attacked as an auditor and as an attacker.

Each test named after a defect (its docstring says what was wrong) failed on the code before its
fix; the others check that what held still holds around the fixes (documented encoding, batches).
"""

from __future__ import annotations

import json
import sqlite3
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from _raw_sqlite import opened
from test_audit_cli import audit_cli_store

from agentgate.audit.entry import MAX_DEPTH, AuditEntry, argument_digest, canonical_json, encode_entry
from agentgate.audit.merkle import leaf_hash
from agentgate.audit.note import Checkpoint, sign_checkpoint
from agentgate.audit.proof import verify_bundle
from agentgate.cli.main import main
from agentgate.errors import AuditError, InputError, KeyFileError, TamperDetected
from agentgate.keys import SigningKey, load_public_key
from agentgate.store import SQLiteStore, Store
from agentgate.store.audit import AuditLog, open_log_key, previous_log_keys

KEY = SigningKey(b"\x09" * 32)
ORIGIN = "review.example/audit"
ENTRY = {"kind": "allow", "principal": "did:key:zAlice", "resource": "tool:pay"}


def _nest(depth: int, leaf: Any = 1) -> Any:
    """``leaf`` inside ``depth`` nested arrays."""
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def _drop_triggers(store: Store) -> None:
    with store.transaction() as tx:
        if store.dialect == "sqlite":
            for (name,) in tx.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'"):
                tx.execute(f"DROP TRIGGER {name}")
        else:
            tx.execute("ALTER TABLE audit_log DISABLE TRIGGER USER")
            tx.execute("ALTER TABLE audit_checkpoints DISABLE TRIGGER USER")


# --- hostile content: what the log writes, it must read back as intact -------------------------


def test_an_integer_beyond_a_double_in_logged_arguments_verifies_and_checkpoints(store: Store) -> None:
    """orjson parses integers beyond a double's range as an error: verify reported the untouched
    entry as 'not an entry (rows moved)' and checkpoint() refused to sign the log for ever."""
    log = AuditLog(store, KEY, ORIGIN)
    log.append({**ENTRY, "args": {"amount": 10**400}})
    log.append({**ENTRY, "budget_delta": -(10**30)})
    report = log.verify()
    assert report.ok, report.problems
    note = log.checkpoint()
    assert log.open_checkpoint(note).size == 2
    assert log.verify().ok
    assert [e.args for e in log.entries()] == [{"amount": 10**400}, {}]


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 1_000, 100_000])
def test_arguments_nested_too_deep_are_an_input_error_not_a_recursion_error(
    depth: int, sqlite_store: SQLiteStore
) -> None:
    """Arguments nested ~1000 deep raised RecursionError (a traceback through Gate and the CLI),
    from argument_digest, the entry encoder and the entry model alike."""
    deep = {"a": _nest(depth)}
    with pytest.raises(InputError, match="nested more than 254 levels"):
        argument_digest(deep)
    with pytest.raises(InputError, match="nested more than 254 levels"):
        canonical_json({"a": _nest(depth, 1.5)})  # the reference encoder's path
    with pytest.raises(InputError):
        encode_entry({**ENTRY, "index": 0, "time": "2026-11-29T10:15:00.000000Z", "args": deep})
    with pytest.raises(InputError):
        AuditEntry.build(**ENTRY, index=0, time="2026-11-29T10:15:00.000000Z", args=deep)
    log = AuditLog(sqlite_store, KEY, ORIGIN)
    with pytest.raises(InputError):
        log.append({**ENTRY, "args": deep})
    assert log.size() == 0
    with pytest.raises(TamperDetected):  # a hostile proof bundle's entry: never a RecursionError
        AuditEntry.from_bytes(b'{"a":' + b"[" * depth + b"]" * depth + b"}")


@pytest.mark.parametrize("leaf", [1, 1.5], ids=["orjson path", "reference path"])
def test_both_encoders_accept_exactly_max_depth_levels(leaf: Any) -> None:
    """The orjson fast path refused 255 levels and fell back to the reference encoder, which
    accepted them (and far more): what was accepted depended on the caller's stack."""
    at_limit = _nest(MAX_DEPTH, leaf)
    assert json.loads(canonical_json(at_limit)) == at_limit
    with pytest.raises(InputError):
        canonical_json(_nest(MAX_DEPTH + 1, leaf))


def test_an_entry_nested_to_the_limit_round_trips_through_log_proof_and_cli(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "agentgate.db"
    with SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store))
        index = log.append({**ENTRY, "args": {"a": _nest(MAX_DEPTH - 1)}})
        assert log.verify().ok
        bundle = log.prove(index)
        entry, _ = verify_bundle(bundle.text(), log.public_key)
        assert entry.args == {"a": _nest(MAX_DEPTH - 1)}
    monkeypatch.setattr("agentgate.cli.main.GROUPS", ("agentgate.cli.audit",))
    monkeypatch.delenv("AGENTGATE_LOG_KEY", raising=False)
    monkeypatch.delenv("AGENTGATE_LOG_ORIGIN", raising=False)
    assert main(["audit", "show", "--json", "--store", str(db)]) == 0
    assert main(["audit", "verify", "--store", str(db)]) == 0


# --- rollback: a saved checkpoint is evidence, never signed over -------------------------------


def _rollback(path: Path, backup: Path) -> None:
    """Replace the SQLite database at ``path`` with the older copy ``backup`` (what an attacker
    with the file, not the key, can do)."""
    backup.replace(path)
    for suffix in ("-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)


def _copy(path: Path, backup: Path) -> None:
    source = sqlite3.connect(path)
    with opened(backup) as copy:
        source.backup(copy)
    source.close()


@pytest.fixture
def cli_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    db = audit_cli_store(tmp_path, monkeypatch)
    with SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store))
        for i in range(4):
            log.append({**ENTRY, "budget_delta": i})
    return db


@pytest.mark.parametrize(
    "appended_after", [0, 2, 9], ids=["rolled back", "forked, shorter", "forked, longer"]
)
def test_checkpoint_out_refuses_to_replace_a_saved_checkpoint_the_log_does_not_extend(
    appended_after: int, cli_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A routine `audit checkpoint --out saved` after the database was restored from an older
    copy signed the rolled-back log and overwrote the only evidence of the rollback."""
    backup = tmp_path / "old.db"
    _copy(cli_db, backup)
    with SQLiteStore(cli_db) as store:
        log = AuditLog(store, open_log_key(store))
        for i in range(3):
            log.append({**ENTRY, "resource": "tool:wire", "budget_delta": 1000 + i})
    saved = tmp_path / "saved.cp"
    assert main(["audit", "checkpoint", "--out", str(saved)]) == 0
    evidence = saved.read_text()
    _rollback(cli_db, backup)
    with SQLiteStore(cli_db) as store:  # the attacker may append entries of their own
        log = AuditLog(store, open_log_key(store))
        for i in range(appended_after):
            log.append({**ENTRY, "budget_delta": -i})
    capsys.readouterr()
    assert main(["audit", "checkpoint", "--out", str(saved)]) == 1
    out = capsys.readouterr().out
    assert out.startswith("REFUSED: audit log: ") and "the saved checkpoint" in out
    assert saved.read_text() == evidence
    with SQLiteStore(cli_db) as store:
        assert store.query("SELECT COUNT(*) FROM audit_checkpoints")[0][0] == 0  # nothing signed
    assert main(["audit", "verify", "--checkpoint", str(saved)]) == 1


def test_checkpoint_out_replaces_a_saved_checkpoint_the_log_extends(
    cli_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = tmp_path / "saved.cp"
    assert main(["audit", "checkpoint", "--out", str(saved)]) == 0
    with SQLiteStore(cli_db) as store:
        AuditLog(store, open_log_key(store)).append(ENTRY)
    assert main(["audit", "checkpoint", "--out", str(saved)]) == 0
    assert saved.read_text().split("\n")[1] == "5"
    assert main(["audit", "verify", "--checkpoint", str(saved)]) == 0


def test_a_saved_checkpoint_of_another_key_is_not_signed_over(
    cli_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = tmp_path / "saved.cp"
    assert main(["audit", "checkpoint", "--out", str(saved)]) == 0
    other = tmp_path / "other"
    other.mkdir()
    with SQLiteStore(other / "agentgate.db") as store:  # another log, another key, same origin
        log = AuditLog(store, open_log_key(store))
        log.append(ENTRY)
        saved.write_text(log.checkpoint())
    evidence = saved.read_text()
    capsys.readouterr()
    # Review R73: a file that says nothing about this log is unusable input, exit 2, as
    # ``audit verify --checkpoint`` says of it (docs/cli.md, saved checkpoints); it was 1, REFUSED.
    assert main(["audit", "checkpoint", "--out", str(saved)]) == 2
    assert "not a checkpoint of this log signed by its key" in capsys.readouterr().err
    assert saved.read_text() == evidence


def test_checkpoint_with_a_saved_note_refuses_a_truncated_or_forked_log(store: Store) -> None:
    log = AuditLog(store, KEY, ORIGIN)
    for i in range(6):
        log.append({**ENTRY, "budget_delta": i})
    log.checkpoint()
    for i in range(3):
        log.append({**ENTRY, "budget_delta": 10 + i})
    kept = log.checkpoint()  # size 9, saved outside the database
    # The attacker (file access, no key) deletes the newest entries and the checkpoint covering them.
    _drop_triggers(store)
    with store.transaction() as tx:
        tx.execute("DELETE FROM audit_log WHERE idx >= 6")
        tx.execute("DELETE FROM audit_checkpoints WHERE size = 9")
    with pytest.raises(TamperDetected, match="has 6 entries, the saved checkpoint had 9"):
        log.checkpoint(saved=kept)
    forger = AuditLog(store, KEY, ORIGIN)  # appends at the end the attacker left
    for i in range(3):
        forger.append({**ENTRY, "budget_delta": -i})
    with pytest.raises(TamperDetected, match="the first 9 entries no longer match the saved checkpoint"):
        log.checkpoint(saved=kept)
    assert [log.open_checkpoint(n).size for n in log.checkpoints()] == [6]
    # Without the saved note only the triggers tell: dropped (SQLite) or disabled (PostgreSQL), they
    # are named, and nothing is signed (review R57: the library signed the forged entries here).
    with pytest.raises(TamperDetected, match="the protection trigger audit_log_"):
        log.checkpoint()
    assert [log.open_checkpoint(n).size for n in log.checkpoints()] == [6]


@pytest.mark.parametrize(
    "forged",
    [b'{"index":4,"kind":"allow"}', b"spaces", b"\xff\xfe not UTF-8", b"[4]"],
    ids=["fields missing", "not canonical", "not UTF-8", "not an object"],
)
def test_bytes_no_agentgate_wrote_after_the_last_checkpoint_are_named_and_never_signed(
    forged: bytes, store: Store
) -> None:
    """verify read only the index field of entries no checkpoint covers, and checkpoint() signed
    them: bytes that are not an entry at all (leaf hash recomputed) passed as intact and were
    signed, while `audit show` then failed on them."""
    log = AuditLog(store, KEY, ORIGIN)
    for i in range(4):
        log.append({**ENTRY, "budget_delta": i})
    log.checkpoint()
    log.append({**ENTRY, "budget_delta": 4})
    if forged == b"spaces":  # the genuine entry, pretty-printed: same fields, not the logged bytes
        forged = json.dumps(json.loads(log.entry_bytes(4)), indent=1).encode()
    _drop_triggers(store)
    with store.transaction() as tx:
        tx.execute("UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = 4", (forged, leaf_hash(forged)))
    report = log.verify()
    assert not report.ok and report.first_bad_index == 4
    assert report.problems == ("entry 4: is not a canonical entry (bytes written outside agentgate)",)
    with pytest.raises(TamperDetected, match="entry 4 is not a canonical entry"):
        log.checkpoint()
    assert len(log.checkpoints()) == 1


# --- a large log: checkpoints and proofs stream -----------------------------------------------


def test_checkpoint_and_proofs_do_not_hold_the_whole_log_in_memory(
    sqlite_store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """checkpoint() kept every leaf hash in a list, prove() and consistency() too: memory grew
    with the log (tens of MB per million entries) where verify() read it in batches."""
    monkeypatch.setattr("agentgate.store.audit._log._BATCH", 200)
    log = AuditLog(sqlite_store, KEY, ORIGIN)
    for _ in range(3):
        log.append_many([ENTRY] * 4_000)
    reference = AuditLog(sqlite_store, KEY, ORIGIN)  # same log: proofs must not depend on batching
    tracemalloc.start()
    try:
        note = log.checkpoint()
        bundle = log.prove(5_432, note)
        proof = log.consistency(4_001, 12_000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 500_000, peak  # 12,000 leaf hashes in a list alone take 0.9 MB
    monkeypatch.setattr("agentgate.store.audit._log._BATCH", 7_000)
    assert reference.prove(5_432, note) == bundle
    assert reference.consistency(4_001, 12_000) == proof
    entry, checkpoint = verify_bundle(bundle.text(), KEY.public, ORIGIN)
    assert (entry.index, checkpoint.size) == (5_432, 12_000)


def test_verify_and_checkpoint_read_large_entries_in_small_batches(
    sqlite_store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verify() read 20,000 rows at a time whatever their size: a log of entries that carry
    large loggable arguments (a document, a prompt) was read whole into memory."""
    monkeypatch.setattr("agentgate.store.audit._log._FIRST_BATCH", 4)
    monkeypatch.setattr("agentgate.store.audit._log._BATCH_BYTES", 1 << 20)
    log = AuditLog(sqlite_store, KEY, ORIGIN)
    for i in range(60):
        log.append({**ENTRY, "args": {"document": f"{i:04d}" + "x" * 100_000}})
    tracemalloc.start()
    try:
        note = log.checkpoint()
        report = log.verify(saved_checkpoint=note)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.ok and report.size == 60, report.problems
    assert peak < 3_000_000, peak  # the log holds 6 MB of entries


def test_verify_checks_every_checkpoint_when_they_are_read_in_batches(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """verify() looked up the next checkpoint size by scanning them all once per checkpoint
    (quadratic: 20,000 checkpoints took 11 s instead of 6) and held every note in memory; it now
    reads them in batches and bisects. Every one is still checked and named by its position."""
    monkeypatch.setattr("agentgate.store.audit._log._CHECKPOINT_BATCH", 7)
    log = AuditLog(store, KEY, ORIGIN)
    for i in range(30):
        log.append({**ENTRY, "budget_delta": i})
        log.checkpoint()
    assert log.verify().checkpoints_checked == 30
    other = SigningKey(b"\x0a" * 32)
    forged = sign_checkpoint(Checkpoint(ORIGIN, 12, bytes(32)), other)  # another key
    fork = sign_checkpoint(Checkpoint(ORIGIN, 20, bytes(32)), KEY)  # the log key, a second root at 20
    with store.transaction() as tx:
        for note, cp in ((forged, 12), (fork, 20)):
            tx.execute(
                "INSERT INTO audit_checkpoints (size, root, note, created) VALUES (?, ?, ?, ?)",
                (cp, bytes(32), note, "2026-11-29T10:15:00.000000Z"),
            )
    report = log.verify()
    assert report.checkpoints_checked == 31
    assert report.problems[0].startswith("checkpoint #31: note carries no signature by the log key")
    assert report.problems[1].startswith("checkpoint #32: two checkpoints of size 20 have different roots")
    assert len(report.problems) == 2


@pytest.mark.parametrize("size", [1, 2, 3, 4, 5, 8, 9, 16, 17, 33, 64, 65])
def test_streamed_proofs_are_the_rfc_proofs_at_every_index(
    size: int, sqlite_store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """prove() and consistency() stream the leaves now: across batch edges (3, then 5 rows) they
    give exactly the RFC 9162 proofs computed from the whole list of leaf hashes."""
    from agentgate.audit.merkle import consistency_proof, inclusion_proof

    monkeypatch.setattr("agentgate.store.audit._log._FIRST_BATCH", 3)
    monkeypatch.setattr("agentgate.store.audit._log._BATCH", 5)
    log = AuditLog(sqlite_store, KEY, ORIGIN)
    log.append_many([{**ENTRY, "budget_delta": i} for i in range(size)])
    note = log.checkpoint()
    log.append_many([ENTRY] * 3)  # entries beyond the checkpoint are not part of its proofs
    leaves = [bytes(r[0]) for r in sqlite_store.query("SELECT leaf_hash FROM audit_log ORDER BY idx")]
    for index in range(size):
        assert list(log.prove(index, note).proof) == inclusion_proof(leaves, index, size)
    for size1 in range(1, size + 1):
        assert log.consistency(size1, size) == consistency_proof(leaves, size1, size)
    with pytest.raises(InputError):
        log.prove(size, note)
    with pytest.raises(InputError):
        log.consistency(0, size)


# --- the command line ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "option", [["--kind", "allowed"], ["--since", "yesterday"], ["--since", "2026-11-29 10:00"]]
)
def test_show_refuses_a_filter_that_can_match_nothing(
    option: list[str], cli_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`show --kind allowed` (a typo) or `--since yesterday` printed nothing and exited 0: an
    auditor read 'no such entries' where the filter was garbage."""
    with pytest.raises(SystemExit) as exited:
        main(["audit", "show", *option])
    assert exited.value.code == 2
    assert "agentgate: error:" in capsys.readouterr().err


def test_show_since_takes_any_prefix_of_the_entry_time(
    cli_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with SQLiteStore(cli_db) as store:
        first = next(AuditLog(store, open_log_key(store)).entries()).time
    for prefix in (first[:4], first[:10], first[:16], first[:19], first):
        capsys.readouterr()
        assert main(["audit", "show", "--json", "--since", prefix]) == 0
        assert len(capsys.readouterr().out.splitlines()) == 4
    assert main(["audit", "show", "--kind", "allow"]) == 0


# --- docs/audit-format.md section 1 is enough to re-encode an entry without Python's json ------


def _doc_string(text: str) -> str:
    short = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}
    return '"' + "".join(short.get(c) or (f"\\u{ord(c):04x}" if ord(c) < 0x20 else c) for c in text) + '"'


def _doc_float(x: float) -> str:
    if x == 0:
        return "-0.0" if str(x).startswith("-") else "0.0"
    # the shortest digits that read back to the same double
    p = next(p for p in range(1, 18) if float(f"{x:.{p - 1}e}") == x)
    mantissa, exponent = f"{abs(x):.{p - 1}e}".split("e")
    digits, e = mantissa.replace(".", ""), int(exponent)
    sign = "-" if x < 0 else ""
    if 1e-4 <= abs(x) < 1e16:
        if e >= 0:
            whole, fraction = digits[: e + 1].ljust(e + 1, "0"), digits[e + 1 :]
        else:
            whole, fraction = "0", "0" * (-e - 1) + digits
        return f"{sign}{whole}.{fraction or '0'}"
    rest = digits[1:]
    return f"{sign}{digits[0]}{'.' + rest if rest else ''}e{'+' if e >= 0 else '-'}{abs(e):02d}"


def _doc_json(value: Any) -> str:
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _doc_float(value)
    if isinstance(value, str):
        return _doc_string(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(_doc_json(v) for v in value) + "]"
    return "{" + ",".join(f"{_doc_string(k)}:{_doc_json(value[k])}" for k in sorted(value)) + "}"


def test_the_documented_encoding_rules_rebuild_the_entry_bytes() -> None:
    """docs/audit-format.md said only 'shortest form' for floats and 'no \\u escapes' (control
    characters are escaped): the rules now written out there rebuild the bytes without json."""
    import random

    rng = random.Random(7)
    floats = [1e16, 1e15, 9999999999999998.0, 0.0001, 0.00001, 1.5e-4, -0.0, 0.0, 1.0, 5e-324, 1e22, -2.5e-8]
    floats += [rng.uniform(-1e6, 1e6) for _ in range(200)]
    floats += [rng.random() * 10 ** rng.randint(-30, 30) for _ in range(200)]
    text = "".join(chr(c) for c in range(0x80)) + "é\u2028\u2029\ufeff😀/"
    args = {"floats": floats, "text": text, "big": 10**40, "nested": {"b": [None, True, False, {"z": ""}]}}
    fields = {**ENTRY, "index": 3, "time": "2026-11-29T10:15:00.000000Z", "args": args, "reasons": [text]}
    expected = _doc_json(AuditEntry.build(**fields).model_dump() | {"reasons": [text]}).encode()
    assert encode_entry(fields) == expected


def test_show_json_prints_each_entry_as_its_exact_bytes(
    cli_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`show --json` printed json.dumps with spaces and \\u escapes: not the logged bytes, so an
    auditor could not recompute a leaf hash from it."""
    with SQLiteStore(cli_db) as store:
        log = AuditLog(store, open_log_key(store))
        log.append({**ENTRY, "args": {"note": "é\u2028\n\x00", "x": 1e16}})
        stored = [bytes(r[0]) for r in store.query("SELECT leaf_hash FROM audit_log ORDER BY idx")]
    capsys.readouterr()
    assert main(["audit", "show", "--json"]) == 0
    lines = capsys.readouterr().out.encode().split(b"\n")
    assert lines[-1] == b""
    assert [leaf_hash(line) for line in lines[:-1]] == stored


def test_report_of_a_large_log_is_bounded(sqlite_store: SQLiteStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """report kept every entry in a list and drew a circle per entry: 100,000 entries took 305 MB
    and wrote 12.8 MB of HTML (a million, ten times that)."""
    from agentgate.audit.report import render_report

    # the page's own memory
    monkeypatch.setattr("agentgate.store.audit._log._BATCH_BYTES", 1 << 20)
    log = AuditLog(sqlite_store, KEY, ORIGIN)
    kinds = ("allow", "outcome", "deny")
    for start in range(0, 8_000, 4_000):
        log.append_many(
            [
                {**ENTRY, "kind": kinds[i % 3], "principal": f"did:key:z{i % 4}", "budget_delta": 1}
                for i in range(start, start + 4_000)
            ]
        )
    tracemalloc.start()
    try:
        page = render_report(log.entries(), None, ())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4_000_000, peak
    assert len(page) < 600_000, len(page)
    assert "8000 entries" in page and "Verified intact" in page
    assert "allow: 2667" in page and "outcome: 2667" in page and "deny: 2666" in page
    assert "did:key:z1</code>: 667 spent" in page  # outcomes of z1: indexes 1, 13, 25, ...
    assert page.count("<circle") <= 3 * 900
    assert "<td>7999</td>" in page and "<td>7500</td>" in page and "<td>7499</td>" not in page


def test_report_of_a_tampered_log_says_so_and_exits_1(
    cli_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """report never verified: the page of a tampered log looked like any other, and an entry
    that was not canonical any more stopped it with an error."""
    with SQLiteStore(cli_db) as store:
        _drop_triggers(store)
        with store.transaction() as tx:
            tx.execute("UPDATE audit_log SET entry = ? WHERE idx = 2", (b'{"index":2,"kind":"allow"}',))
    out = tmp_path / "r.html"
    assert main(["audit", "report", "--out", str(out)]) == 1
    assert "TAMPERED" in capsys.readouterr().out
    page = out.read_text()
    assert "TAMPERED: the log failed verification" in page
    assert "entry 2: bytes do not match the stored leaf hash" in page
    assert "3 entries" in page  # the three that still parse


def test_an_auditor_verifies_a_copy_of_the_database_with_the_public_key_only(
    cli_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every read verb needed the private log key (verify, show, explain, report all opened it):
    an auditor given the database and log.pub could not verify the log."""
    assert main(["audit", "checkpoint"]) == 0
    auditor = tmp_path / "auditor"
    auditor.mkdir()
    copy = auditor / "evidence.db"
    _copy(cli_db, copy)
    public = auditor / "log.pub"
    public.write_bytes((cli_db.parent / "log.pub").read_bytes())
    capsys.readouterr()
    assert main(["audit", "verify", "--store", str(copy)]) == 2  # no log.key beside the copy
    assert "log.key" in capsys.readouterr().err
    assert not (auditor / "log.key").exists()
    assert main(["audit", "verify", "--store", str(copy), "--key", str(public)]) == 0
    assert capsys.readouterr().out.startswith("intact: 4 entries")
    assert main(["audit", "show", "--store", str(copy), "--key", str(public), "--json"]) == 0
    assert main(["audit", "explain", "1", "--store", str(copy), "--key", str(public)]) == 0
    page = auditor / "r.html"
    assert main(["audit", "report", "--store", str(copy), "--key", str(public), "--out", str(page)]) == 0
    assert "Verified intact" in page.read_text()
    stranger = SigningKey(b"\x0b" * 32).public.did
    assert main(["audit", "verify", "--store", str(copy), "--key", stranger]) == 1
    with SQLiteStore(copy) as store:
        log = AuditLog(store, load_public_key(public))
        assert log.checkpoint() == log.latest_checkpoint()  # nothing new to sign: the stored one
        log.append(ENTRY)
        with pytest.raises(AuditError, match="needs the log's private key"):
            log.checkpoint()
        assert len(log.checkpoints()) == 1


def test_no_new_log_key_is_made_for_a_log_that_already_has_checkpoints(
    store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """open_log_key created a fresh key wherever it did not find one (PostgreSQL: .agentgate/ under
    the working directory): `audit checkpoint` or a Gate started elsewhere signed with a stray key,
    after which the service's own checkpoints and verify failed as if the log were tampered."""
    monkeypatch.delenv("AGENTGATE_LOG_PREVIOUS_KEYS", raising=False)
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "service" / "log.key"))
    log = AuditLog(store, open_log_key(store), ORIGIN)
    log.append(ENTRY)
    log.checkpoint()
    elsewhere = tmp_path / "elsewhere" / "log.key"
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(elsewhere))
    with pytest.raises(KeyFileError, match="has checkpoints signed by one"):
        open_log_key(store)
    assert not elsewhere.exists() and not elsewhere.parent.exists()
    # Rotating on purpose: the old public key listed first, then a new key is made and used.
    monkeypatch.setenv("AGENTGATE_LOG_PREVIOUS_KEYS", str(tmp_path / "service" / "log.pub"))
    rotated = AuditLog(store, open_log_key(store), ORIGIN, previous_keys=previous_log_keys())
    assert elsewhere.exists()
    rotated.append(ENTRY)
    assert rotated.open_checkpoint(rotated.checkpoint()).size == 2
    assert rotated.verify().ok


def test_cli_checkpoint_without_the_log_key_makes_none(
    cli_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["audit", "checkpoint"]) == 0
    key = cli_db.parent / "log.key"
    key.rename(cli_db.parent / "moved.key")
    capsys.readouterr()
    assert main(["audit", "checkpoint"]) == 2
    assert "has checkpoints signed by one" in capsys.readouterr().err
    assert not key.exists()


def test_show_and_explain_escape_what_would_draw_fake_lines(
    cli_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A refused call is logged with the resource the agent named: `show` and `explain` printed
    it raw, so a newline drew a fake entry line under it (and escape codes reached the terminal)."""
    fake = "\n     9  2026-11-29T10:15:00.000000Z  allow             did:key:zAdmin"
    with SQLiteStore(cli_db) as store:
        log = AuditLog(store, open_log_key(store))
        index = log.append(
            {**ENTRY, "kind": "deny", "resource": "tool:x" + fake, "reasons": ["\x1b[2Jwiped"]}
        )
    capsys.readouterr()
    assert main(["audit", "show"]) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 5 and "\x1b" not in out
    assert "tool:x\\n" in out and "\\x1b[2Jwiped" in out
    assert main(["audit", "explain", str(index)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\n     9  2026" not in out
    assert main(["audit", "show", "--json", "--kind", "deny"]) == 0
    assert json.loads(capsys.readouterr().out)["resource"] == "tool:x" + fake  # the bytes as logged
