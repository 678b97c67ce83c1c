"""Signed checkpoints of the audit log: the C2SP signed-note form (agentgate/audit/note.py: a
checkpoint opens only for its own log, name and key), the proof bundles built on one
(agentgate/audit/proof.py), and what ``AuditLog`` proves, explains and checks against them
(agentgate/store/audit/)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from agentgate.audit.entry import AuditEntry, utc_now
from agentgate.audit.merkle import RootAccumulator, inclusion_proof, leaf_hash
from agentgate.audit.note import Checkpoint, key_id, open_checkpoint, sign_checkpoint, sign_note, verifier_key
from agentgate.audit.proof import ProofBundle, verify_bundle
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


def test_a_checkpoint_of_another_origin_is_refused_as_such_not_as_unsigned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Kills: ``open_checkpoint`` checking the origin only after the signature, under the name the
    caller gave: a log read with another origin (``AGENTGATE_LOG_ORIGIN`` unset or mistyped on
    the auditor's machine) had every checkpoint reported as "note carries no signature by the
    log key", a forgery, though each is signed by that very key. Rule: a checkpoint whose body
    names another log is refused (still ``TamperDetected``: it is no checkpoint of this log)
    saying which log it is for and which was expected."""
    note = sign_checkpoint(Checkpoint(OTHER, 3, b"\x11" * 32), KEY)
    with pytest.raises(TamperDetected, match=f"checkpoint is for log '{OTHER}', expected '{ORIGIN}'"):
        open_checkpoint(note, KEY.public, ORIGIN)
    from agentgate.cli.main import main

    log = _log(tmp_path, 2)
    log.checkpoint()
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", OTHER)
    store = str(tmp_path / "agentgate.db")
    assert main(["audit", "verify", "--store", store, "--key", KEY.public.did]) == 1
    out = capsys.readouterr().out
    assert f"checkpoint #1: checkpoint is for log '{ORIGIN}', expected '{OTHER}'" in out
    assert "no signature" not in out


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


@pytest.mark.parametrize(
    "tail",
    [
        "trailing garbage\n",
        "\n",
        "\nmore\n",
        "\u2014 r47.example/audit AAAA\n",
        "\u2014 witness.example AAAA\n",
        "{same}",
        "{forged}",
        "\u2014 witness.example AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n"
        * 100,
    ],
    ids=[
        "garbage",
        "blank",
        "blank-then-text",
        "short-blob",
        "short-witness",
        "twice",
        "forged-second",
        "101-lines",
    ],
)
def test_a_note_with_any_malformed_signature_line_after_a_valid_one_is_refused(tail: str) -> None:
    """Review R54: a signed note with text after its valid signature line (trailing garbage, a
    blank line, a second signature by the log key, a forged one) opened as valid, since
    ``open_note`` returned at the first line that verified and never read the rest; the same
    lines before it were refused. Rule (C2SP signed-note, as Go's note.Open reads it): every
    signature line is read before the note is trusted, and one malformed line makes the note
    malformed, wherever it stands."""
    note = sign_checkpoint(Checkpoint(ORIGIN, 1, b"\x22" * 32), KEY)
    line = note.split("\n\n", 1)[1]
    dash, name, blob = line.split(" ")
    flipped = bytearray(base64.b64decode(blob))
    flipped[-1] ^= 1  # the same key id, a signature that does not verify
    forged = f"{dash} {name} {base64.b64encode(bytes(flipped)).decode()}\n"
    hostile = note + tail.format(same=line, forged=forged)
    assert open_checkpoint(note, KEY.public, ORIGIN).size == 1
    with pytest.raises(TamperDetected):
        open_checkpoint(hostile, KEY.public, ORIGIN)


def test_a_blank_line_after_a_notes_signature_is_named_as_such() -> None:
    """Review R54: a saved checkpoint to which an editor or ``echo >>`` added a blank line is
    refused (as C2SP signed-note readers refuse it); the refusal says what is wrong in words, not
    as ``malformed signature line ''``."""
    note = sign_checkpoint(Checkpoint(ORIGIN, 1, b"\x22" * 32), KEY)
    with pytest.raises(TamperDetected, match=r"^signed note has an empty line among its signature lines$"):
        open_checkpoint(note + "\n", KEY.public, ORIGIN)


def test_a_proof_bundle_with_trailing_garbage_is_invalid_on_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R54: ``audit verify-proof`` said ``valid`` (exit 0) for a bundle with a line of
    garbage after its checkpoint's signature line. Rule: such a bundle is INVALID (exit 1)."""
    from agentgate.cli.main import main

    log = _log(tmp_path, 3)
    bundle = tmp_path / "entry.tlog-proof"
    bundle.write_text(log.prove(1).text() + "trailing garbage\n")
    pub = tmp_path / "log.pub"
    pub.write_text(KEY.public.did + "\n")
    assert main(["audit", "verify-proof", str(bundle), "--key", str(pub)]) == 1
    assert capsys.readouterr().out.startswith("INVALID: malformed signature line 'trailing garbage'")


def test_a_checkpoint_note_body_with_a_short_root_is_malformed() -> None:
    """Kills: ``Checkpoint.parse`` accepting a root that is not 32 bytes. Rule: a body whose root
    hash is not a SHA-256 is malformed (``TamperDetected``), even when it is signed."""
    body = f"{ORIGIN}\n1\n{base64.b64encode(b'x' * 31).decode()}\n"
    with pytest.raises(TamperDetected, match="31 bytes"):
        Checkpoint.parse(body)


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
