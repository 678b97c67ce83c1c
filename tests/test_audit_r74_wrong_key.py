"""The audit verbs given a key that is not the log's: one ``likely cause:`` in the same words.

``audit verify`` with a public key under which no stored checkpoint verifies, all signed by one
other key, says the likelier cause (a wrong key) and names both key ids (review R54). Until review
R74 the other verbs that check a signature under the key they are given said only that the note
"carries no signature by the log key ... any other key is a forgery": ``verify-proof --key`` with
another key's ``log.pub``, and ``checkpoint``, ``prove`` and ``explain`` with another log key (or
another ``--key``). Each still refuses (exit 1: a replaced checkpoint looks the same), and now
adds the same ``likely cause:`` naming both key ids and how that verb is given its key: ``--key``
for ``verify-proof``, ``AGENTGATE_LOG_KEY`` for ``checkpoint`` and ``prove`` (neither takes the
other; until the review of R74 every verb named both), both for the verbs that read. A key file
that is no key (empty) is named as that, exit 2.

Real SQLite stores, real key files, the command run in this process.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _cli import cli
from _signed_log import checkpoints, log_environment
from test_audit_r57_repairs import ORIGIN
from test_audit_r73_out_refuses import _store

from agentgate.audit.note import key_id
from agentgate.errors import TamperDetected
from agentgate.keys import SigningKey, save_key
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog, open_log_key

assert log_environment  # the autouse fixture, imported to apply here


def _other_key(tmp_path: Path) -> tuple[Path, Path, SigningKey]:
    """Another Ed25519 key pair (not the log's), saved as ``keys/other.key`` and ``other.pub``."""
    directory = tmp_path / "keys"
    directory.mkdir(mode=0o700)
    key = SigningKey.generate()
    private, public = save_key(key, directory, "other")
    return private, public, key


def _ids(db: Path, other: SigningKey) -> tuple[str, str]:
    """The key ids of the log key and of ``other`` under the log's origin."""
    with SQLiteStore(db) as store:
        ours = open_log_key(store).public
    return key_id(ORIGIN, ours).hex(), key_id(ORIGIN, other.public).hex()


def _says_likely_cause(text: str, ours: str, theirs: str, where: str) -> None:
    """``text`` gives the likely cause naming both key ids and ``where``, the way the verb is given
    its key, and no way it does not take (review R74: ``--key, AGENTGATE_LOG_KEY`` for all)."""
    cause = text[text.index("likely cause: ") :]
    assert f"(key id {theirs})" in cause and f"signed by one other key (key id {ours})" in cause, text
    assert f"not this log's key ({where})" in cause, text


def test_verify_proof_with_another_public_key_says_the_likely_cause(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R74: ``verify-proof --key`` with another key's public key said INVALID and "any
    other key is a forgery", no more. Rule: still INVALID, exit 1, and a second line ``likely
    cause:`` naming both key ids, as ``audit verify`` words it, and ``--key``, the one way this
    verb takes a key (not ``AGENTGATE_LOG_KEY``, which it does not read)."""
    db, _note = _store(tmp_path)
    bundle = tmp_path / "one.proof"
    code, _out, err = cli(capsys, "audit", "prove", "1", "--store", str(db), "--out", str(bundle))
    assert code == 0, err
    _private, public, other = _other_key(tmp_path)
    code, out, err = cli(capsys, "audit", "verify-proof", str(bundle), "--key", str(public))
    assert (code, err) == (1, ""), (code, out, err)
    first, second = out.splitlines()
    assert first.startswith("INVALID: "), out
    assert second.startswith("likely cause: "), out
    _says_likely_cause(second, *_ids(db, other), "--key")


@pytest.mark.parametrize("verb", [("checkpoint",), ("prove", "1")], ids=["checkpoint", "prove"])
def test_signing_with_another_log_key_says_the_likely_cause(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    verb: tuple[str, ...],
) -> None:
    """Review R74: ``checkpoint`` and ``prove`` with ``AGENTGATE_LOG_KEY`` naming another key were
    REFUSED for a stored checkpoint that "does not open", no more. Rule: still REFUSED, exit 1,
    nothing signed or written, and the line says the likely cause, naming both key ids and
    ``AGENTGATE_LOG_KEY`` (these verbs take no ``--key``)."""
    db, _note = _store(tmp_path)
    private, _public, other = _other_key(tmp_path)
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(private))
    before = checkpoints(db)
    out_file = tmp_path / "out.txt"
    code, out, err = cli(capsys, "audit", *verb, "--store", str(db), "--out", str(out_file))
    assert (code, err) == (1, ""), (code, out, err)
    assert out.startswith("REFUSED: "), out
    monkeypatch.delenv("AGENTGATE_LOG_KEY")
    _says_likely_cause(out, *_ids(db, other), "AGENTGATE_LOG_KEY")
    assert checkpoints(db) == before and not out_file.exists()


def test_explain_with_another_public_key_says_the_likely_cause(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R74: ``explain --key`` with another key's public key refused for a stored checkpoint
    that "does not open", no more. Rule: the same refusal, and the likely cause, both key ids."""
    db, _note = _store(tmp_path)
    _private, public, other = _other_key(tmp_path)
    code, out, err = cli(capsys, "audit", "explain", "1", "--store", str(db), "--key", str(public))
    assert code != 0, (code, out, err)
    _says_likely_cause(out + err, *_ids(db, other), "--key, AGENTGATE_LOG_KEY")


@pytest.mark.parametrize("verb", ["verify", "verify-proof", "checkpoint"])
def test_an_empty_key_file_is_named_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], verb: str
) -> None:
    """Review R74: an empty key file was "neither a did:key nor a PEM public key" (or "not a
    PKCS#8 PEM private key"), which sends one looking at a key's format. Rule: exit 2, one line
    naming the file and that it is empty, nothing written."""
    db, _note = _store(tmp_path)
    empty = tmp_path / "keys" / "empty.key"
    empty.parent.mkdir(mode=0o700)
    empty.write_bytes(b"")
    empty.chmod(0o600)
    before = checkpoints(db)
    if verb == "checkpoint":
        monkeypatch.setenv("AGENTGATE_LOG_KEY", str(empty))
        argv: tuple[str, ...] = ("checkpoint", "--store", str(db))
    elif verb == "verify":
        argv = ("verify", "--store", str(db), "--key", str(empty))
    else:
        bundle = tmp_path / "one.proof"
        bundle.write_text("c2sp.org/tlog-proof@v1\n", encoding="utf-8")
        argv = ("verify-proof", str(bundle), "--key", str(empty))
    code, out, err = cli(capsys, "audit", *argv)
    assert (code, out) == (2, ""), (code, out, err)
    assert err.startswith(f"agentgate: error: {empty}: ") and err.count("\n") == 1, err
    assert " empty" in err, err
    assert checkpoints(db) == before


@pytest.mark.parametrize("signs", [True, False], ids=["private key", "public key"])
def test_a_log_a_program_opens_with_another_key_names_no_command_line_flag(
    tmp_path: Path, signs: bool
) -> None:
    """Review R81: ``AuditLog`` itself named the command line's ways of giving a key
    (``AGENTGATE_LOG_KEY``, ``--key``) when a program opened a log with another key and the latest
    stored checkpoint did not open. Rule: the same likely cause with both key ids, and no flag or
    variable named unless the opener names one (``key_named``), as the command line does."""
    db, _note = _store(tmp_path)
    other = SigningKey.generate()
    ours, theirs = _ids(db, other)
    with SQLiteStore(db) as store:
        for named in (None, "AGENTGATE_LOG_KEY"):
            log = AuditLog(store, other if signs else other.public, ORIGIN, key_named=named)
            with pytest.raises(TamperDetected, match="likely cause: ") as raised:
                log.explain(1)
            said = str(raised.value)
            assert f"(key id {theirs})" in said and f"signed by one other key (key id {ours})" in said
            if named is None:
                assert "AGENTGATE_LOG_KEY" not in said and "--key" not in said, said
                assert "not this log's key, open the log with the right one" in said, said
            else:
                assert "not this log's key (AGENTGATE_LOG_KEY), run again with the right one" in said, said
