"""The audit log at scale: bounded entries, an indexed ``explain``, sizes past the end of the log."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from agentgate.audit.entry import (
    DEFAULT_MAX_ENTRY_BYTES,
    AuditEntry,
    argument_digest,
    canonical_json,
    elision,
    encode_bounded,
    encode_entry,
)
from agentgate.cli.main import main
from agentgate.errors import BeyondLogEnd, InputError, TamperDetected
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore, Store
from agentgate.store._postgres import PostgresStore
from agentgate.store.audit import AuditLog, open_log_key

KEY = SigningKey(b"\x07" * 32)
ALICE = SigningKey(b"\x01" * 32).did
ORIGIN = "test.example/audit"


def decision(kind: str = "allow", *, ref: int | None = None, **extra: Any) -> dict[str, Any]:
    args = extra.pop("args", {"amount": 120, "currency": "EUR"})
    return {
        "kind": kind,
        "principal": ALICE,
        "chain_hash": "sha256:" + "ab" * 32,
        "resource": "tool:payments.refund",
        "args_digest": argument_digest(args),
        "args": args,
        "reasons": ["capability covers call"],
        "ref": ref,
        **extra,
    }


def login_role(owner: Store, server: Any, url: str, role: str, *grants: str) -> str:
    """Create the PostgreSQL login ``role`` (if missing) through ``owner``, run ``grants`` in the
    same transaction, and return ``url`` (the owner's) for that role."""
    with owner.transaction() as tx:
        tx.execute(
            f"DO $$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{role}') "
            f"THEN CREATE ROLE {role} LOGIN; END IF; END $$"
        )
        for grant in grants:
            tx.execute(grant)
    return url.replace(f"postgresql://{server.user}@", f"postgresql://{role}@")


@pytest.fixture
def log(store: Store) -> AuditLog:
    return AuditLog(store, KEY, origin=ORIGIN)


def _reopen(store: Store, tmp_path: Path) -> Store:
    """A new store object on the same database: its schema is ensured again, as in a new process."""
    if isinstance(store, SQLiteStore):
        return SQLiteStore(store.path)
    assert isinstance(store, PostgresStore)
    return PostgresStore(store.url)


# --- entry size ---------------------------------------------------------------------------------


def test_a_large_argument_is_recorded_by_digest_and_the_log_verifies(log: AuditLog, store: Store) -> None:
    blob = "x" * 300_000
    full = {"amount": 120, "currency": "EUR", "blob": blob}
    index = log.append(decision(args=full))
    raw = bytes(store.query("SELECT entry FROM audit_log WHERE idx = ?", (index,))[0][0])
    assert len(raw) <= DEFAULT_MAX_ENTRY_BYTES
    entry = AuditEntry.from_bytes(raw)
    assert entry.args == {"amount": 120, "currency": "EUR"}  # the small values stay in clear
    assert entry.args_digest == argument_digest(full)  # still covers the full arguments
    value = canonical_json(blob)
    assert (
        f"elided args.blob: {len(value)} bytes, sha256:{hashlib.sha256(value).hexdigest()}" in entry.reasons
    )
    log.checkpoint()
    assert log.verify().ok


def test_an_entry_within_the_bound_is_unchanged() -> None:
    fields = {**decision(), "index": 3, "time": "2026-11-30T10:00:00.000000Z"}
    assert encode_bounded(fields, 4096) == encode_entry(fields)


def test_many_medium_arguments_fall_back_to_one_digest_of_all_of_them() -> None:
    # 100 values of 90 bytes: eliding each costs about what it saves, so the object goes whole.
    args = {f"k{i:03d}": "v" * 90 for i in range(100)}
    fields = {**decision(args=args), "index": 0, "time": "2026-11-30T10:00:00.000000Z"}
    data = encode_bounded(fields, 4096)
    entry = AuditEntry.from_bytes(data)
    assert len(data) <= 4096 and entry.args == {}
    assert entry.reasons == ("capability covers call", elision("args", canonical_json(args)))


def test_a_huge_reason_is_recorded_by_digest(log: AuditLog) -> None:
    message = "boom " * 40_000
    index = log.append(decision("outcome", ref=0, status="error", reasons=["RuntimeError", message]))
    entry = log.entry(index)
    data = message.encode("utf-8")
    assert entry.reasons == (
        "RuntimeError",
        f"elided reason: {len(data)} bytes, sha256:{hashlib.sha256(data).hexdigest()}",
    )
    assert log.verify().ok


def test_an_entry_that_cannot_be_bounded_is_refused_and_nothing_is_written(log: AuditLog) -> None:
    log.append(decision())
    with pytest.raises(InputError, match="largest field, resource, takes 100013 bytes"):
        log.append(decision(resource="tool:" + "r" * 100_006))
    assert log.size() == 1 and log.verify().ok


def test_the_bound_is_configurable(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTGATE_AUDIT_MAX_ENTRY_BYTES", "8192")
    log = AuditLog(store, KEY, origin=ORIGIN)
    assert log.max_entry_bytes == 8192
    index = log.append(decision(args={"blob": "y" * 10_000}))
    assert len(log.entry_bytes(index)) <= 8192
    assert AuditLog(store, KEY, origin=ORIGIN, max_entry_bytes=1 << 20).max_entry_bytes == 1 << 20
    with pytest.raises(InputError, match="from 4096 to"):
        AuditLog(store, KEY, origin=ORIGIN, max_entry_bytes=100)
    monkeypatch.setenv("AGENTGATE_AUDIT_MAX_ENTRY_BYTES", "lots")
    with pytest.raises(InputError, match="AGENTGATE_AUDIT_MAX_ENTRY_BYTES"):
        AuditLog(store, KEY, origin=ORIGIN)


def test_entries_written_under_a_larger_bound_still_verify(store: Store) -> None:
    """The bound applies when writing: an older large entry is not re-judged by verify or checkpoint."""
    AuditLog(store, KEY, origin=ORIGIN, max_entry_bytes=1 << 20).append(
        decision(args={"blob": "z" * 200_000})
    )
    log = AuditLog(store, KEY, origin=ORIGIN)
    assert len(log.entry_bytes(0)) > DEFAULT_MAX_ENTRY_BYTES
    assert log.verify().ok
    log.checkpoint()
    assert log.verify().ok


# --- sizes past the end of the log ----------------------------------------------------------------


def test_a_size_past_the_end_is_an_input_error_naming_the_log_size(log: AuditLog) -> None:
    for _ in range(5):
        log.append(decision())
    with pytest.raises(BeyondLogEnd, match="audit log has only 5 entries; size 9 is past its end") as caught:
        log.consistency(2, 9)
    assert isinstance(caught.value, InputError) and not isinstance(caught.value, TamperDetected)
    assert (caught.value.requested, caught.value.size) == (9, 5)
    with pytest.raises(BeyondLogEnd, match="only 5 entries; entry 7"):
        log.prove(7)
    with pytest.raises(BeyondLogEnd, match="only 5 entries; entry 5"):
        log.explain(5)
    assert len(log.consistency(2, 5)) > 0


def _cli_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AuditLog:
    """The audit verbs alone on a new SQLite file that ``AGENTGATE_STORE`` names; its log, open."""
    monkeypatch.setattr("agentgate.cli.main.GROUPS", ("agentgate.cli.audit",))
    monkeypatch.delenv("AGENTGATE_LOG_ORIGIN", raising=False)
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "log.key"))
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "agentgate.db"))
    store = SQLiteStore(tmp_path / "agentgate.db")
    return AuditLog(store, open_log_key(store))


def test_cli_prove_past_the_end_exits_2_with_the_log_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    log = _cli_log(tmp_path, monkeypatch)
    log.append(decision())
    log.store.close()
    assert main(["audit", "prove", "3", "--out", str(tmp_path / "p")]) == 2
    assert "audit log has only 1 entry; entry 3 is past its end" in capsys.readouterr().err
    assert main(["audit", "explain", "1"]) == 2
    assert "audit log has only 1 entry; entry 1 is past its end" in capsys.readouterr().err


def test_cli_explain_proves_what_it_shows_and_reads_only_that(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The old ``audit explain`` parsed the whole log: a malformed entry elsewhere stopped it."""
    log = _cli_log(tmp_path, monkeypatch)
    _call_log(log)
    log.checkpoint()
    log.append(decision("outcome", ref=5, status="ok"))
    _tamper(log.store, "UPDATE audit_log SET entry = ? WHERE idx = 2", (b"not an entry",))
    log.store.close()
    assert main(["audit", "explain", "0"]) == 0
    out = capsys.readouterr().out
    assert "related entry 3: outcome ok" in out
    assert "evidence: 2 of 2 entries proven in the log signed at size 6" in out
    assert main(["audit", "explain", "5"]) == 0
    assert "1 of 2 entries proven in the log signed at size 6; entry 6 is newer" in capsys.readouterr().out


# --- explain ------------------------------------------------------------------------------------


def _call_log(log: AuditLog) -> None:
    """0 allow, 1 approval_required, 2 deny, 3 outcome of 0, 4 approval_given for 1, 5 allow."""
    log.append(decision())
    log.append(decision("approval_required"))
    log.append(decision("deny"))
    log.append(decision("outcome", ref=0, status="ok"))
    log.append(decision("approval_given", ref=1))
    log.append(decision())


def test_explain_finds_related_entries_through_the_index_and_proves_them(log: AuditLog) -> None:
    _call_log(log)
    log.checkpoint()
    explained = log.explain(0)
    assert explained.indexed
    assert [e.index for e in explained.related] == [3]
    assert explained.checkpoint is not None and explained.checkpoint.size == 6 and not explained.unproven
    assert [e.index for e in log.explain(3).related] == [0]
    assert [e.index for e in log.explain(1).related] == [4]
    log.append(decision("outcome", ref=5, status="error"))
    later = log.explain(5)
    assert [e.index for e in later.related] == [6] and later.unproven == (6,)


def test_explain_without_a_checkpoint_proves_nothing_and_says_so(log: AuditLog) -> None:
    _call_log(log)
    explained = log.explain(0)
    assert explained.checkpoint is None and explained.unproven == (0, 3)


def test_explain_reads_only_its_entries(log: AuditLog, store: Store) -> None:
    """A malformed entry elsewhere (left for ``verify`` to report) does not stop explaining another:
    the old explain parsed the whole log and failed on it."""
    _call_log(log)
    log.checkpoint()
    _tamper(store, "UPDATE audit_log SET entry = ? WHERE idx = 5", (b"not an entry",))
    assert [e.index for e in log.explain(0).related] == [3]
    assert not log.verify().ok


def test_explain_refuses_an_entry_not_in_the_signed_tree(log: AuditLog, store: Store) -> None:
    _call_log(log)
    log.checkpoint()
    forged = AuditEntry.from_bytes(log.entry_bytes(3)).model_copy(update={"status": "error"}).to_bytes()
    from agentgate.audit.merkle import leaf_hash

    _tamper(store, "UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = 3", (forged, leaf_hash(forged)))
    with pytest.raises(TamperDetected, match="is not in the tree signed at size 6"):
        log.explain(0)
    _tamper(store, "UPDATE audit_log SET leaf_hash = ? WHERE idx = 3", (b"\x00" * 32,))
    with pytest.raises(TamperDetected, match="entry 3 does not match its leaf hash"):
        log.explain(0)


def test_a_forged_index_row_shows_nothing_unrelated(log: AuditLog, store: Store) -> None:
    _call_log(log)
    with store.transaction() as tx:
        tx.execute("INSERT INTO audit_refs (idx, ref) VALUES (?, ?)", (5, 0))
    assert [e.index for e in log.explain(0).related] == [3]


def test_args_that_look_like_a_reference_do_not_confuse_the_index(log: AuditLog, store: Store) -> None:
    """The canonical bytes of these args hold ``,"ref":0,"resource":`` too (PostgreSQL's trigger
    reads the reference as text)."""
    log.append(decision())
    log.append(decision(args={"a": 1, "ref": 0, "resource": "x"}))
    log.append(decision("outcome", ref=1, status="ok", args={"a": 1, "ref": 0, "resource": "x"}))
    # A string after the top-level ref holding the same text, and one that is not ASCII.
    log.append(decision("outcome", ref=0, status="ok", resource='tool:é,"ref":1,"resource":"x'))
    assert sorted(tuple(map(int, r)) for r in store.query("SELECT idx, ref FROM audit_refs")) == [
        (2, 1),
        (3, 0),
    ]
    assert [e.index for e in log.explain(1).related] == [2]
    assert [e.index for e in log.explain(0).related] == [3]


def test_an_existing_log_is_indexed_when_first_opened(store: Store, tmp_path: Path) -> None:
    """A log written before the index existed (its tables and trigger dropped here, as the old
    schema had none) gets every reference indexed by the first ``AuditLog`` that opens it."""
    log = AuditLog(store, KEY, origin=ORIGIN)
    _call_log(log)
    log.append(decision(args={"a": 1, "ref": 0, "resource": "x"}))  # 6: no reference of its own
    with store.transaction() as tx:
        if store.dialect == "sqlite":
            tx.execute("DROP TRIGGER audit_log_index_ref")
        else:
            tx.execute("DROP TRIGGER audit_log_index_ref ON audit_log")
            tx.execute("DROP FUNCTION agentgate_audit_index_ref()")
        tx.execute("DROP TABLE audit_refs")
        tx.execute("DROP TABLE audit_refs_built")
    with _reopen(store, tmp_path) as again:
        upgraded = AuditLog(again, KEY, origin=ORIGIN)
        assert upgraded.refs_indexed
        assert sorted(tuple(map(int, r)) for r in again.query("SELECT idx, ref FROM audit_refs")) == [
            (3, 0),
            (4, 1),
        ]
        upgraded.append(decision("outcome", ref=5, status="ok"))
        assert [e.index for e in upgraded.explain(5).related] == [7]
        assert [e.index for e in upgraded.explain(1).related] == [4]


def test_without_the_index_explain_scans_and_finds_the_same(store: Store, tmp_path: Path) -> None:
    log = AuditLog(store, KEY, origin=ORIGIN)
    _call_log(log)
    log.checkpoint()
    log.refs_indexed = False  # a role that could not create the index
    scanned = log.explain(0)
    assert not scanned.indexed and [e.index for e in scanned.related] == [3] and not scanned.unproven


def _tamper(store: Store, sql: str, params: tuple[Any, ...]) -> None:
    """As an attacker with the owner's rights: edit a row past the append-only triggers."""
    with store.transaction() as tx:
        if store.dialect == "sqlite":
            tx.execute("DROP TRIGGER audit_log_no_update")
        else:
            tx.execute("ALTER TABLE audit_log DISABLE TRIGGER USER")
        tx.execute(sql, params)
        if store.dialect == "sqlite":
            tx.execute(
                "CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log "
                "BEGIN SELECT RAISE(ABORT, 'audit_log is append-only'); END"
            )
        else:
            tx.execute("ALTER TABLE audit_log ENABLE TRIGGER USER")


def test_explain_caches_block_roots_and_does_not_trust_them(log: AuditLog, store: Store) -> None:
    """Blocks of 1024 leaf hashes are hashed once and kept in ``audit_nodes``; a wrong cached
    root makes the proof fail, and explain then proves from the leaf hashes and empties the cache."""
    log.append_many([decision()] * 2500)
    log.append(decision("outcome", ref=1200, status="ok"))
    log.checkpoint()
    assert [e.index for e in log.explain(1200).related] == [2500]
    assert int(store.query("SELECT COUNT(*) FROM audit_nodes")[0][0]) == 2
    assert [e.index for e in log.explain(2500).related] == [1200]  # from the cache this time
    with store.transaction() as tx:
        tx.execute("UPDATE audit_nodes SET hash = ? WHERE position = 0", (b"\x00" * 32,))
    explained = log.explain(2500)
    assert [e.index for e in explained.related] == [1200] and not explained.unproven
    assert int(store.query("SELECT COUNT(*) FROM audit_nodes")[0][0]) == 0
    log.explain(2500)  # fills the cache again
    forged = AuditEntry.from_bytes(log.entry_bytes(1200)).model_copy(update={"rule": "forged"}).to_bytes()
    from agentgate.audit.merkle import leaf_hash

    _tamper(
        store, "UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = 1200", (forged, leaf_hash(forged))
    )
    with pytest.raises(TamperDetected, match="not in the tree signed at size 2501"):
        log.explain(2500)


@pytest.mark.postgres
def test_a_role_without_rights_on_the_index_still_keeps_it(postgres_server: Any, postgres_url: str) -> None:
    """PostgreSQL, least privilege: a role with only SELECT and INSERT on the audit tables appends
    (the trigger indexes as its owner) and explains by a full scan; the owner's explain uses the index."""
    with PostgresStore(postgres_url) as owner:
        _call_log(AuditLog(owner, KEY, origin=ORIGIN))
        app_url = login_role(
            owner,
            postgres_server,
            postgres_url,
            "ag_scale",
            "GRANT SELECT, INSERT ON audit_log, audit_checkpoints TO ag_scale",
        )
        with PostgresStore(app_url) as app:
            log = AuditLog(app, KEY, origin=ORIGIN)
            assert not log.refs_indexed
            log.append(decision("outcome", ref=5, status="ok"))
            log.checkpoint()
            assert [e.index for e in log.explain(5).related] == [6]
        explained = AuditLog(owner, KEY, origin=ORIGIN).explain(5)
        assert explained.indexed and [e.index for e in explained.related] == [6] and not explained.unproven


def test_short_reasons_stay_in_clear_whatever_the_size() -> None:
    """An approval's ``signature:HEX`` (138 characters) is never recorded by digest: the entry
    holding it and too many other short reasons is refused instead."""
    signature = "signature:" + "ab" * 64
    long_reason = "why " * 2000
    fields = {
        **decision("approval_given", ref=0, reasons=["request:r1", signature, long_reason]),
        "index": 1,
        "time": "2026-11-30T10:00:00.000000Z",
    }
    entry = AuditEntry.from_bytes(encode_bounded(fields, 4096))
    assert entry.reasons[:2] == ("request:r1", signature)
    assert entry.reasons[2].startswith("elided reason: 8000 bytes, sha256:")
    many = {**fields, "reasons": [signature] * 40}
    with pytest.raises(InputError, match=r"over the log's limit of 4096 bytes .* largest field, reasons,"):
        encode_bounded(many, 4096)


def test_prove_uses_the_node_cache_and_its_bundle_verifies(log: AuditLog, store: Store) -> None:
    from agentgate.audit.proof import verify_bundle

    log.append_many([decision()] * 3000)
    note = log.checkpoint()
    bundle = log.prove(2100, note)
    assert int(store.query("SELECT COUNT(*) FROM audit_nodes")[0][0]) == 2  # blocks 0 and 1
    verify_bundle(bundle.text(), KEY.public)
    assert log.prove(2100, note) == bundle
    with store.transaction() as tx:
        tx.execute("UPDATE audit_nodes SET hash = ?", (b"\x01" * 32,))
    assert log.prove(2100, note) == bundle  # a wrong cache is not used


GATE_POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker]}}
tools:
  lookup:
    args: {{id: {{type: string, required: true}}, note: {{type: string}}}}
    loggable: [id, note]
roles:
  worker:
    kind: agent
    capabilities:
      - resource: tool:lookup
        constraints: {{id: {{prefix: "x"}}}}
    ttl_s: 600
"""


def test_the_gate_writes_bounded_entries_for_a_huge_argument(tmp_path: Path) -> None:
    """Every writer goes through the log's bound: a Gate call with a 300 KB loggable argument
    leaves a bounded allow and outcome, a refusal that quotes such an argument a bounded deny,
    and the log verifies."""
    from agentgate.capabilities import Call
    from agentgate.gate import Gate
    from agentgate.policy import parse_policy

    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    policy = parse_policy(GATE_POLICY.format(**{n: k.did for n, k in keys.items()}), source="gate.yaml")
    gate = Gate(policy, SQLiteStore(tmp_path / "agentgate.db"))
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        auth = gate.authorize(agent, Call.tool("lookup", {"id": "x" * 300_000, "note": "small"}))
        assert auth.allowed and auth.audit_index is not None

        def tool() -> None:
            raise RuntimeError("y" * 300_000)

        with pytest.raises(RuntimeError):
            gate.run(auth, tool)
        gate.flush()
        allow = gate.audit.explain(auth.audit_index)
        assert len(gate.audit.entry_bytes(auth.audit_index)) <= DEFAULT_MAX_ENTRY_BYTES
        assert allow.entry.args == {"note": "small"}
        assert any(r.startswith("elided args.id: 300002 bytes, sha256:") for r in allow.entry.reasons)
        (outcome,) = allow.related
        assert outcome.kind == "outcome" and outcome.status == "error"
        assert len(gate.audit.entry_bytes(outcome.index)) <= DEFAULT_MAX_ENTRY_BYTES
        assert outcome.reasons == ("RuntimeError",)  # the Gate records the exception's type only
        denied = gate.authorize(agent, Call.tool("lookup", {"id": "z" * 300_000}))
        assert not denied.allowed and denied.audit_index is not None
        refusal = gate.audit.entry(denied.audit_index)
        # The rule that refused quotes the argument: that reason is recorded by digest too.
        assert len(gate.audit.entry_bytes(denied.audit_index)) <= DEFAULT_MAX_ENTRY_BYTES
        # Since review R59 the authority's refusal (the grant does not cover it) is recorded too.
        quoted, code, elided_id = refusal.reasons
        assert code == "scope_creep:call_not_covered"
        assert quoted.startswith("elided reason: ") and elided_id.startswith("elided args.id: 300002 bytes")
        assert gate.verify().ok
    finally:
        gate.close()
