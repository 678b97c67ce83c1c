"""Review r47, audit: the tamper-evident audit log (entries, Merkle tree, signed checkpoints,
proof bundles, the HTML report and ``AuditLog``), mutated one change at a time; each test here
kills a mutant the earlier tests let live (the mutant each kills is named in its docstring).

Everything runs on real SQLite files; the attacker drops the append-only triggers first, as
anyone with the database owner's rights can.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from agentgate.audit.entry import AuditEntry, encode_entry, utc_now
from agentgate.audit.merkle import (
    RootAccumulator,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
    root_from_inclusion_proof,
    verify_consistency,
)
from agentgate.audit.note import Checkpoint, key_id, open_checkpoint, sign_checkpoint, sign_note, verifier_key
from agentgate.audit.proof import ProofBundle, verify_bundle
from agentgate.audit.report import render_report
from agentgate.errors import BeyondLogEnd, InputError, TamperDetected
from agentgate.keys import PublicKey, SigningKey
from agentgate.store import SQLiteStore, Store
from agentgate.store.audit import AuditLog

KEY = SigningKey(b"\x47" * 32)
OLD_KEY = SigningKey(b"\x46" * 32)
ORIGIN = "r47.example/audit"
OTHER = "r47.example/other"
ALICE = "did:key:zAlice"


def _log(tmp_path: Path, n: int = 0, *, key: SigningKey = KEY, **kw: object) -> AuditLog:
    return _fill(SQLiteStore(tmp_path / "agentgate.db"), n, key=key, **kw)


def _fill(store: Store, n: int = 0, *, key: SigningKey = KEY, **kw: object) -> AuditLog:
    log = AuditLog(store, key, ORIGIN, **kw)  # type: ignore[arg-type]
    for i in range(n):
        log.append({"kind": "allow", "principal": ALICE, "resource": "tool:t", "budget_delta": i})
    return log


def _attack(log: AuditLog, sql: str, params: tuple[object, ...] = ()) -> None:
    with log.store.transaction() as tx:
        if log.store.dialect == "sqlite":
            for name in ("audit_log_next_index", "audit_log_no_update", "audit_log_no_delete"):
                tx.execute(f"DROP TRIGGER IF EXISTS {name}")
        else:
            tx.execute("ALTER TABLE audit_log DISABLE TRIGGER USER")
        tx.execute(sql, params)


def _rewrite(log: AuditLog, idx: int, **changes: object) -> None:
    """Edit entry ``idx`` and store the matching leaf hash too (only a checkpoint can tell)."""
    data = log.entry_bytes(idx)
    edited = AuditEntry.from_bytes(data).model_copy(update=changes).to_bytes()
    _attack(
        log, "UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = ?", (edited, leaf_hash(edited), idx)
    )


def _entry(index: int, **fields: object) -> bytes:
    return AuditEntry.build(index=index, time=utc_now(), kind="allow", principal=ALICE, **fields).to_bytes()


# --- signed checkpoints -------------------------------------------------------------------------


def test_a_checkpoint_of_another_log_does_not_open_when_the_origin_is_given() -> None:
    """Kills: ``open_checkpoint`` taking the key name from the note's first line even when the
    caller names the origin. Rule: a checkpoint signed by the right key for another log (another
    origin) is not a checkpoint of this log."""
    note = sign_checkpoint(Checkpoint(OTHER, 3, b"\x11" * 32), KEY)
    assert open_checkpoint(note, KEY.public).origin == OTHER  # it is a genuine checkpoint of OTHER
    with pytest.raises(TamperDetected):
        open_checkpoint(note, KEY.public, ORIGIN)


def test_a_body_naming_another_origin_signed_under_this_name_is_refused() -> None:
    """Kills: the ``checkpoint.origin != name`` check dropped from ``open_checkpoint``. Rule: the
    signature line's key name and the body's origin must both be this log's: a body for log
    OTHER signed by the log key under this log's name is no checkpoint of either."""
    note = sign_note(Checkpoint(OTHER, 3, b"\x11" * 32).text(), KEY, ORIGIN)
    with pytest.raises(TamperDetected, match="is for log"):
        open_checkpoint(note, KEY.public, ORIGIN)


def test_a_note_text_with_a_blank_line_is_not_signed() -> None:
    """Kills: ``sign_note`` accepting text with a blank line. Rule: the signed text ends at the
    first blank line, so text holding one would be signed but never open as what was signed."""
    with pytest.raises(InputError):
        sign_note(f"{ORIGIN}\n1\n\nextra\n", KEY, ORIGIN)


def test_a_signature_line_under_another_name_is_ignored() -> None:
    """Kills: ``open_note`` matching only the key id, not the key name of a signature line. Rule
    (C2SP signed-note): a line verifies only under the name and key id the verifier expects; the
    same signature relabelled with another name is some other signer's and ignored."""
    note = sign_checkpoint(Checkpoint(ORIGIN, 1, b"\x22" * 32), KEY)
    relabelled = note.replace(f"\u2014 {ORIGIN} ", "\u2014 witness.example ")
    with pytest.raises(TamperDetected, match="no signature by the log key"):
        open_checkpoint(relabelled, KEY.public, ORIGIN)


def test_a_previous_key_opens_only_checkpoints_of_this_log(tmp_path: Path) -> None:
    """Kills: ``AuditLog.open_checkpoint`` opening a note with a previous key without naming the
    origin. Rule: a rotated-out key still verifies this log's old checkpoints, never a checkpoint
    it signed for another log."""
    log = _log(tmp_path, key=KEY, previous_keys=[OLD_KEY.public])
    mine = sign_checkpoint(Checkpoint(ORIGIN, 2, b"\x33" * 32), OLD_KEY)
    assert log.open_checkpoint(mine).size == 2
    with pytest.raises(TamperDetected):
        log.open_checkpoint(sign_checkpoint(Checkpoint(OTHER, 2, b"\x33" * 32), OLD_KEY))


# --- proof bundles ------------------------------------------------------------------------------


def _bundle_of(entries: list[bytes], index: int, origin: str = ORIGIN) -> str:
    leaves = [leaf_hash(e) for e in entries]
    acc = RootAccumulator()
    acc.extend(leaves)
    note = sign_checkpoint(Checkpoint(origin, len(leaves), acc.root()), KEY)
    proof = tuple(inclusion_proof(leaves, index))
    return ProofBundle(index, entries[index], proof, note).text()


def test_a_bundle_whose_entry_names_another_index_is_refused() -> None:
    """Kills: ``verify_bundle`` without its check that the entry's own index is the proven one.
    Rule: a signed tree holding, at position 1, an entry that says it is entry 0 (a duplicate
    replayed into the log) proves nothing about entry 0 or 1: the bundle is refused."""
    entries = [_entry(0), _entry(0, rule="replayed")]
    assert verify_bundle(_bundle_of(entries, 0), KEY.public, ORIGIN)[0].index == 0
    with pytest.raises(TamperDetected, match="proof is for index 1"):
        verify_bundle(_bundle_of(entries, 1), KEY.public, ORIGIN)


def test_a_bundle_of_another_log_is_refused_when_the_origin_is_given() -> None:
    """Kills: ``verify_bundle`` not passing ``origin`` on to ``open_checkpoint``. Rule: an auditor
    who names the log gets a refusal for a genuine bundle of another log signed by the same key."""
    text = _bundle_of([_entry(0), _entry(1)], 1, origin=OTHER)
    assert verify_bundle(text, KEY.public)[1].origin == OTHER
    with pytest.raises(TamperDetected):
        verify_bundle(text, KEY.public, ORIGIN)


def test_a_bundle_without_its_entry_is_refused() -> None:
    """Kills: ``ProofBundle.parse`` accepting a bundle with no ``extra`` line. Rule: the entry is
    what a bundle proves; without it the bundle is malformed (a typed ``TamperDetected``)."""
    text = _bundle_of([_entry(0)], 0)
    head, _, note = text.partition("\n\n")
    stripped = "\n".join(line for line in head.split("\n") if not line.startswith("extra ")) + "\n\n" + note
    with pytest.raises(TamperDetected, match="carries no entry"):
        ProofBundle.parse(stripped)


# --- AuditLog: prove, explain, consistency ------------------------------------------------------


def test_prove_against_an_older_checkpoint_refuses_the_first_entry_after_it(tmp_path: Path) -> None:
    """Kills: ``prove``'s coverage check ``index < checkpoint.size`` written ``<=``. Rule: entry
    ``size`` is not covered by a checkpoint of ``size`` entries: a typed ``InputError``, never a
    ``ValueError`` from the tree code."""
    log = _log(tmp_path, 3)
    note = log.checkpoint()
    log.append({"kind": "deny", "principal": ALICE})
    with pytest.raises(InputError, match="not covered"):
        log.prove(3, note)
    assert verify_bundle(log.prove(2, note).text(), KEY.public, ORIGIN)[0].index == 2


def test_prove_given_an_empty_note_refuses_it_and_signs_nothing(tmp_path: Path) -> None:
    """Fixed (lead): ``prove(i, "")`` took the empty note for none (``note or checkpoint()``),
    skipped the input checks made for that case and signed a fresh checkpoint. Rule: only ``None``
    asks for a fresh checkpoint; an empty note is a checkpoint that does not open."""
    log = _log(tmp_path, 3)
    with pytest.raises(TamperDetected):
        log.prove(1, "")
    assert log.store.query("SELECT COUNT(*) FROM audit_checkpoints")[0][0] == 0


def test_consistency_past_the_end_is_beyond_the_log(tmp_path: Path) -> None:
    """Kills: ``consistency`` without its check ``size2 > end``. Rule: asking for a size the log
    has not reached is the caller's error (``BeyondLogEnd``), not a report of tampering."""
    log = _log(tmp_path, 4)
    assert len(log.consistency(1, 4)) > 0
    with pytest.raises(BeyondLogEnd):
        log.consistency(1, 9)


def test_explain_of_an_outcome_shows_the_decision_it_refers_to(tmp_path: Path) -> None:
    """Kills: ``_related`` keeping only entries that refer to the one asked for, dropping the one
    it refers to. Rule: explaining an outcome shows its decision (``ref``), proven."""
    log = _log(tmp_path, 2)
    log.append({"kind": "outcome", "principal": ALICE, "ref": 1, "status": "ok"})
    log.checkpoint()
    shown = log.explain(2)
    assert [e.index for e in shown.related] == [1]
    assert shown.unproven == ()


def test_explain_refuses_the_last_checkpointed_entry_edited_with_its_leaf_hash(tmp_path: Path) -> None:
    """Kills: ``_prove_included`` counting entry ``size - 1`` as not covered (``idx < size - 1``).
    Rule: the last entry a checkpoint covers is proven against it like any other, so an edit of
    it (leaf hash rewritten too) is refused, and it is not listed as unproven either."""
    log = _log(tmp_path, 5)
    log.checkpoint()
    assert log.explain(4).unproven == ()
    _rewrite(log, 4, kind="deny")
    with pytest.raises(TamperDetected, match="entry 4"):
        log.explain(4)


def test_a_render_with_one_problem_does_not_say_verified() -> None:
    """Kills: ``_verification`` saying "Verified intact" for one problem (``len(problems) <= 1``).
    Rule: any problem at all makes the page say TAMPERED, never verified."""
    page = render_report([], None, ["entry 3: bytes do not match the stored leaf hash"])
    assert "TAMPERED" in page and "Verified intact" not in page
    assert "Verified intact" in render_report([], None, [])
    assert "was not verified" in render_report([], None, None)


def test_append_many_writes_every_entry(tmp_path: Path) -> None:
    """Kills: ``append_many`` writing only part of the batch. Rule: a group commit writes all its
    entries or none, each at its own next index."""
    log = _log(tmp_path, 1)
    assert log.append_many([{"kind": "deny", "principal": ALICE}] * 3) == [1, 2, 3]
    assert log.size() == 4 and log.verify().ok


# --- entries ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        {"kind": "approve"},
        {"index": -1},
        {"principal": ""},
        {"principal": "x" * 513},
        {"ref": -1},
        {"time": "2026-01-01T00:00:00.000000Z\n"},
    ],
)
def test_encode_entry_refuses_what_the_model_refuses(bad: dict[str, object]) -> None:
    """Kills: a check dropped from ``_fast_fields`` (kind in the set, index >= 0, principal 1..512
    characters, ref >= 0) or ``$`` for ``\\Z`` in the time pattern. Rule: the fast encoder writes
    nothing the model (and so ``from_bytes``, which verify uses) would refuse: such an entry
    would make the log unverifiable."""
    fields = {"index": 0, "time": "2026-01-01T00:00:00.000000Z", "kind": "allow", "principal": ALICE, **bad}
    with pytest.raises(InputError):
        encode_entry(fields)


def test_a_checkpoint_note_body_with_a_short_root_is_malformed() -> None:
    """Kills: ``Checkpoint.parse`` accepting a root that is not 32 bytes. Rule: a body whose root
    hash is not a SHA-256 is malformed (``TamperDetected``), even when it is signed."""
    body = f"{ORIGIN}\n1\n{base64.b64encode(b'x' * 31).decode()}\n"
    with pytest.raises(TamperDetected, match="31 bytes"):
        Checkpoint.parse(body)


def test_prove_refuses_an_entry_edited_with_its_leaf_hash_after_the_checkpoint(tmp_path: Path) -> None:
    """Kills: ``prove`` returning the proof rebuilt from the stored leaf hashes without checking
    it against the signed root. Rule: no bundle that cannot verify is handed out: an entry edited
    after its checkpoint (leaf hash rewritten too) gets ``TamperDetected``, not a bundle."""
    log = _log(tmp_path, 6)
    note = log.checkpoint()
    assert verify_bundle(log.prove(2, note).text(), KEY.public, ORIGIN)[0].kind == "allow"
    _rewrite(log, 2, kind="deny")
    with pytest.raises(TamperDetected, match="entry 2"):
        log.prove(2, note)


def test_push_subtree_refuses_a_subtree_that_does_not_start_on_its_boundary() -> None:
    """Kills: the alignment check dropped from ``RootAccumulator.push_subtree``. Rule: a subtree of
    2**h leaves may only follow a multiple of 2**h leaves; anything else is a different tree
    (a wrong root), so it is refused."""
    acc = RootAccumulator()
    acc.add(leaf_hash(b"a"))
    with pytest.raises(ValueError, match="cannot follow 1 leaves"):
        acc.push_subtree(b"\x00" * 32, 1)
    acc.add(leaf_hash(b"b"))
    acc.push_subtree(b"\x00" * 32, 1)
    assert acc.size == 4


def test_the_key_id_is_the_signed_note_one() -> None:
    """Kills: ``key_id`` hashing ``name || 0x01 || key`` without the newline between. Rule
    (C2SP signed-note, docs/audit-format.md): the key id is the first 4 bytes of
    SHA-256(name || 0x0A || 0x01 || key), so other note tools accept the log's verifier key;
    pinned by the example key of Go's golang.org/x/mod/sumdb/note documentation."""
    blob = base64.b64decode("ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW")
    public = PublicKey(blob[1:])
    assert key_id("PeterNeumann", public).hex() == "c74f20a3"
    assert (
        verifier_key("PeterNeumann", public)
        == "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
    )


def test_checkpoint_refuses_to_build_on_an_edited_checkpoint_row(tmp_path: Path) -> None:
    """Kills: ``checkpoint`` trusting the latest row's size column without comparing it with its
    signed note, and ``verify`` not comparing each row's columns with its note. Rule: a checkpoint row whose size was edited (here shrunk, to re-sign over a
    rewritten tail) is tampering: nothing new is signed."""
    log = _log(tmp_path, 4)
    log.checkpoint()
    log.append({"kind": "deny", "principal": ALICE})
    with log.store.transaction() as tx:
        tx.execute("DROP TRIGGER audit_checkpoints_no_update")
        tx.execute("UPDATE audit_checkpoints SET size = 2")
    before = len(log.checkpoints())
    with pytest.raises(TamperDetected, match="does not match its signed note"):
        log.checkpoint()
    assert len(log.checkpoints()) == before
    report = log.verify()
    assert any("does not match its signed note (row edited)" in p for p in report.problems), report.problems


def test_checkpoint_refuses_a_saved_checkpoint_that_forks_the_stored_one(tmp_path: Path) -> None:
    """Kills: ``checkpoint`` dropping its check that the saved checkpoint and the last stored one
    agree at the same size. Rule: two signed roots for one size is a fork; nothing is signed."""
    log = _log(tmp_path, 3)
    stored = log.open_checkpoint(log.checkpoint())
    log.append({"kind": "deny", "principal": ALICE})
    forked = sign_checkpoint(Checkpoint(ORIGIN, stored.size, b"\x44" * 32), KEY)
    with pytest.raises(TamperDetected, match="disagree"):
        log.checkpoint(forked)
    assert log.open_checkpoint(log.checkpoint()).size == 4  # without it, the log signs as usual


def test_consistency_refuses_a_log_with_a_deleted_entry(tmp_path: Path) -> None:
    """Kills: ``_subtree_roots`` without its gap check (a missing row shifts every later leaf).
    Rule: a proof is never built over a log with an entry missing: ``TamperDetected``."""
    log = _log(tmp_path, 6)
    _attack(log, "DELETE FROM audit_log WHERE idx = 2")
    with pytest.raises(TamperDetected, match="entry 2 is missing"):
        log.consistency(1, 5)


def _swap(log: AuditLog) -> None:
    (a, ha), (b, hb) = ((log.entry_bytes(i), leaf_hash(log.entry_bytes(i))) for i in (3, 4))
    _attack(log, "DELETE FROM audit_log WHERE idx IN (3, 4)")
    _attack(log, "INSERT INTO audit_log (idx, entry, leaf_hash) VALUES (3, ?, ?), (4, ?, ?)", (b, hb, a, ha))


def _spaced(log: AuditLog) -> None:
    data = log.entry_bytes(3).replace(b'"kind":', b'"kind": ')
    _attack(log, "UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = 3", (data, leaf_hash(data)))


ATTACKS = {
    "row deleted": (
        lambda log: _attack(log, "DELETE FROM audit_log WHERE idx = 3"),
        "entry 3 is missing",
        "entry 3: missing",
    ),
    "entry edited": (
        lambda log: _attack(log, "UPDATE audit_log SET entry = ? WHERE idx = 3", (log.entry_bytes(2),)),
        "entry 3 does not match its leaf hash",
        "entry 3: bytes do not match",
    ),
    "rows swapped with their hashes": (
        _swap,
        "entry 3 does not carry its own index",
        "entry 3: holds the entry of index 4",
    ),
    "non-canonical bytes, hash recomputed": (
        _spaced,
        "entry 3 is not a canonical entry",
        "entry 3: is not a canonical",
    ),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_tampering_after_the_last_checkpoint_is_refused_and_reported(store: Store, attack: str) -> None:
    """Kills: each of ``checkpoint``'s refusals (a missing index, bytes that do not match their
    leaf hash, an entry not carrying its own index, bytes that are not a canonical entry) and
    ``verify``'s checks of the entries no checkpoint covers (the gap test, the leaf hash
    comparison, the own-index and canonical-form reading, ``_index_of``'s re-encoding) dropped.
    Rule: tampering with entries newer than the last checkpoint is never signed over, and
    ``verify`` names the entry (on SQLite and PostgreSQL)."""
    log = _fill(store, 2)
    first = log.checkpoint()
    for _ in range(4):
        log.append({"kind": "deny", "principal": ALICE, "reasons": ["no grant"]})
    tamper, refusal, problem = ATTACKS[attack]
    tamper(log)
    with pytest.raises(TamperDetected, match=refusal):
        log.checkpoint()
    assert log.checkpoints() == [first]
    report = log.verify()
    assert not report.ok and report.first_bad_index == 3
    assert any(p.startswith(problem) for p in report.problems), report.problems


def test_entries_deleted_under_a_checkpoint_are_refused_and_reported(store: Store) -> None:
    """Kills: ``checkpoint`` without its check that no target size is past the log's end, and
    ``verify`` without its report of a checkpoint larger than the log. Rule: the newest entries
    deleted under a stored checkpoint are named, and nothing is signed over the shorter log."""
    log = _fill(store, 5)
    log.checkpoint()
    _attack(log, "DELETE FROM audit_log WHERE idx >= 3")
    with pytest.raises(TamperDetected, match="has 3 entries"):
        log.checkpoint()
    report = log.verify()
    assert not report.ok and report.first_bad_index == 3
    assert any("a checkpoint covers 5 entries but the log has 3" in p for p in report.problems)


def test_an_inclusion_proof_with_a_hash_too_many_is_refused_as_too_long() -> None:
    """Kills: ``root_from_inclusion_proof`` without its stop when ``sn`` reaches 0 (RFC 9162
    2.1.3.2: "if sn is 0, stop and fail"). Rule: a proof longer than the tree is deep implies no
    root at all (the mutant returned a root with the extra hash folded in)."""
    leaves = [leaf_hash(bytes([i])) for i in range(5)]
    proof = inclusion_proof(leaves, 2)
    assert root_from_inclusion_proof(leaves[2], 2, 5, proof) == _root(leaves)
    with pytest.raises(TamperDetected, match="longer than the tree is deep"):
        root_from_inclusion_proof(leaves[2], 2, 5, [*proof, b"\x00" * 32])


def _root(leaves: list[bytes]) -> bytes:
    acc = RootAccumulator()
    acc.extend(leaves)
    return acc.root()


def test_a_consistency_proof_with_a_hash_too_many_is_refused_as_too_long() -> None:
    """Kills: ``verify_consistency`` without its stop when ``sn`` reaches 0 (RFC 9162 2.1.4.2).
    Rule: a proof longer than the trees are deep is refused for what it is."""
    leaves = [leaf_hash(bytes([i])) for i in range(7)]
    proof = consistency_proof(leaves, 3, 7)
    verify_consistency(3, 7, proof, _root(leaves[:3]), _root(leaves))
    with pytest.raises(TamperDetected, match="longer than the trees are deep"):
        verify_consistency(3, 7, [*proof, b"\x00" * 32], _root(leaves[:3]), _root(leaves))


def test_a_consistency_proof_to_a_smaller_tree_is_refused() -> None:
    """Kills: ``verify_consistency`` without its ``size1 > size2`` check. Rule: a log never shrinks;
    without the check, a proof crafted from the old root (``[root1, c1, c2]``) "proves" that a tree
    of 5 leaves is a prefix of one of 3 whose root the log signs as H(H(root1, c1), c2)."""
    root1 = _root([leaf_hash(bytes([i])) for i in range(5)])
    c1, c2 = b"\x01" * 32, b"\x02" * 32
    root2 = node_hash(node_hash(root1, c1), c2)
    with pytest.raises(TamperDetected, match="never shrinks"):
        verify_consistency(5, 3, [root1, c1, c2], root1, root2)


def test_an_entry_over_the_limit_after_elision_is_refused_and_not_written(tmp_path: Path) -> None:
    """Kills: ``encode_bounded`` without its final refusal (an entry still over the limit after
    recording args and reasons by digest was written anyway). Rule: an entry is bounded or not
    written at all, never cut or let through over the bound."""
    log = _log(tmp_path, 1, max_entry_bytes=4096)
    with pytest.raises(InputError, match="over the log's limit"):
        log.append({"kind": "deny", "principal": ALICE, "resource": "tool:" + "x" * 5000})
    assert log.size() == 1 and log.verify().ok
