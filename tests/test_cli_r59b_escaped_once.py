"""What the library quotes escaped already (``repr``: a bundle's origin line, a checkpoint's
signature line, its tree size) the audit verbs print escaped once, not twice: a backslash shows
as ``\\\\`` as ``repr`` wrote it, never ``\\\\\\\\``, and a control character as ``\\x1b``."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from agentgate.cli.main import main


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store whose log holds one entry, its checkpoint kept in cp, and the entry's proof in
    p.bundle. Shared: each test writes only a file of its own beside them."""
    where = tmp_path_factory.mktemp("escaped")
    with pytest.MonkeyPatch.context() as env:
        env.chdir(where)
        env.setenv("AGENTGATE_STORE", str(where / "store.db"))
        env.delenv("AGENTGATE_LOG_ORIGIN", raising=False)
        for argv in (
            ["keys", "new", "root", "--dir", "k"],
            ["store", "init"],
            ["grant", "issue", "--issuer", "k/root.key", "--to", "k/root.pub", "--allow", "tool:x", "--ttl", "1h", "--out", "a.tok"],
            ["grant", "revoke", "a.tok"],
            ["audit", "prove", "0", "--out", "p.bundle"],
            ["audit", "checkpoint", "--out", "cp"],
        ):  # fmt: skip
            assert main(argv) == 0, argv
    return where


@pytest.fixture
def world(made: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(made)
    monkeypatch.setenv("AGENTGATE_STORE", str(made / "store.db"))
    monkeypatch.delenv("AGENTGATE_LOG_ORIGIN", raising=False)
    return made


@pytest.mark.parametrize(
    ("origin", "shown"), [("x\\y", "'x\\\\y'"), ("x\x1b[31my", "'x\\x1b[31my'")], ids=["backslash", "escape"]
)
def test_verify_proof_invalid_line_quotes_the_origin_escaped_once(
    world: Path, capsys: pytest.CaptureFixture[str], origin: str, shown: str
) -> None:
    """Review R59: verify-proof's INVALID line escaped the origin repr had quoted again ('x\\\\\\\\y')."""
    origin_line = (world / "p.bundle").read_text().split("\n\n")[1].splitlines()[0]
    capsys.readouterr()
    assert main(["audit", "verify-proof", "p.bundle", "--key", "log.pub", "--origin", origin]) == 1
    out, err = capsys.readouterr()
    assert (out, err) == (f"INVALID: checkpoint is for log {origin_line!r}, expected {shown}\n", "")


def test_verify_with_a_checkpoint_whose_signature_line_is_malformed_quotes_it_once(
    world: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R59: audit verify --checkpoint's error escaped the signature line repr had quoted again."""
    (world / "bad.cp").write_text((world / "cp").read_text() + "bad\\line\n")
    capsys.readouterr()
    assert main(["audit", "verify", "--checkpoint", "bad.cp"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "agentgate: error: bad.cp: not a checkpoint of this log signed by its key: malformed signature line 'bad\\\\line'\n"
    )


def test_verify_proof_of_a_malformed_bundle_quotes_its_text_once(
    world: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R59: verify-proof's error for a malformed bundle escaped the tree size repr had quoted again."""
    bundle = (world / "p.bundle").read_text()
    (world / "q.bundle").write_text(bundle.replace("\n1\n", "\n1\\z\n", 1))
    capsys.readouterr()
    assert main(["audit", "verify-proof", "q.bundle", "--key", "log.pub"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "agentgate: error: q.bundle: not a well-formed proof bundle: "
        "checkpoint line 2 (tree size) '1\\\\z' is not a decimal number\n"
    )


def test_verify_names_a_trigger_whose_name_holds_an_escape_sequence_escaped(
    world: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R59: audit verify wrote a foreign trigger's name raw, so an escape sequence in it reached the terminal."""
    copy = world / "foreign.db"
    copy.write_bytes((world / "store.db").read_bytes())
    raw = sqlite3.connect(copy)
    raw.execute('CREATE TRIGGER "t\x1b[2K\\x" AFTER INSERT ON audit_log BEGIN SELECT 1; END')
    raw.commit()
    raw.close()
    monkeypatch.setenv("AGENTGATE_STORE", str(copy))
    capsys.readouterr()
    assert main(["audit", "verify"]) == 1
    out = capsys.readouterr().out
    named = 'the trigger "t\\x1b[2K\\\\x" on table audit_log is not one agentgate made: '
    assert "\x1b" not in out and f"  - {named}" in out
    assert main(["audit", "checkpoint"]) == 1  # its refusal names the trigger in verify's words
    assert capsys.readouterr().out.startswith(f"REFUSED: {named}")
