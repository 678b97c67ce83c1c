"""Review R66: a checkpoint whose tree size line has more digits than any tree size, and a proof
bundle with a blank line inside its proof, are refused naming the line and what is wrong with it
(agentgate/audit/note.py, agentgate/audit/proof.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.audit.note import Checkpoint, sign_note
from agentgate.audit.proof import ProofBundle
from agentgate.cli.main import main
from agentgate.errors import TamperDetected
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog

KEY = SigningKey(b"\x66" * 32)
ORIGIN = "r66.example/audit"
TOO_LARGE = "more than 18446744073709551615 (2**64-1), the most the C2SP tlog formats allow"


def audit_cli_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point the ``audit`` verbs at the store ``tmp_path/agentgate.db`` (log origin ``ORIGIN``),
    run from ``tmp_path``."""
    monkeypatch.setattr("agentgate.cli.main.GROUPS", ("agentgate.cli.audit",))
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "agentgate.db"))
    monkeypatch.chdir(tmp_path)


def allows(log: AuditLog, n: int) -> None:
    """Append ``n`` allow entries to ``log``."""
    for i in range(n):
        log.append({"kind": "allow", "principal": "did:key:zAlice", "budget_delta": i})


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str, str]:
    """A log of 3 entries with a checkpoint, its public key in log.pub; the checkpoint's root line
    and the proof of entry 1."""
    audit_cli_on(tmp_path, monkeypatch)
    with SQLiteStore(tmp_path / "agentgate.db") as store:
        log = AuditLog(store, KEY, ORIGIN)
        allows(log, 3)
        note = log.checkpoint()
        bundle = log.prove(1).text()
    (tmp_path / "log.pub").write_text(KEY.public.did + "\n")
    return tmp_path, note.split("\n")[2], bundle


def _signed(size: str, root: str) -> str:
    """A checkpoint note of tree size line ``size`` signed by the log key."""
    return sign_note(f"{ORIGIN}\n{size}\n{root}\n", KEY, ORIGIN)


@pytest.mark.parametrize(
    ("size", "said"),
    [
        ("1" * 21, f"111111111111111111111 is {TOO_LARGE}"),
        ("18446744073709551616", f"18446744073709551616 is {TOO_LARGE}"),
        ("9" * 5000, f"has 5000 digits: {TOO_LARGE}"),
        ("007", "'007' has a leading zero"),
    ],
)
def test_verify_names_the_size_line_of_a_saved_checkpoint_and_what_is_wrong(
    world: tuple[Path, str, str], size: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R66: a saved checkpoint whose size line had 21 digits was refused as ``checkpoint
    tree size '111...' is not a decimal number``, which it is, naming no line; one of 20 digits
    above 2**64-1 (no C2SP reader takes it) was read. Rule: exit 2, naming line 2 and saying it is
    larger than any tree size, or has a leading zero."""
    tmp_path, root, _ = world
    (tmp_path / "c").write_text(_signed(size, root))
    capsys.readouterr()
    assert main(["audit", "verify", "--key", "log.pub", "--checkpoint", "c"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"agentgate: error: c: not a checkpoint: checkpoint line 2 (tree size) {said}\n"


def test_verify_proof_names_the_size_line_of_its_checkpoint(
    world: tuple[Path, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R66: as verify, for the checkpoint a proof bundle carries."""
    tmp_path, root, bundle = world
    head = bundle.partition("\n\n")[0]
    (tmp_path / "p").write_text(head + "\n\n" + _signed("1" * 21, root))
    capsys.readouterr()
    assert main(["audit", "verify-proof", "p", "--key", "log.pub"]) == 2
    assert capsys.readouterr().err == (
        "agentgate: error: p: not a well-formed proof bundle: checkpoint line 2 (tree size) "
        f"111111111111111111111 is {TOO_LARGE}\n"
    )


def test_the_largest_tree_size_still_parses() -> None:
    """Review R66: 2**64-1 is a tree size (the bound is C2SP's, not one less)."""
    text = f"{ORIGIN}\n18446744073709551615\n{'A' * 43}=\n"
    assert Checkpoint.parse(text).size == 2**64 - 1


@pytest.mark.parametrize(
    ("after", "said"),
    [
        (0, "line 2 is blank inside the proof: line 3 is still one of its lines"),
        (1, "line 3 is blank inside the proof: line 4 is still one of its lines"),
        (2, "line 4 is blank inside the proof: line 5 is still one of its lines"),
        (3, "line 5 is blank inside the proof: line 6 is still one of its lines"),
        (4, "line 7 is blank: one blank line, line 6, ends the proof"),
    ],
)
def test_verify_proof_names_a_blank_line_inside_the_proof(
    world: tuple[Path, str, str], after: int, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R66: a blank line inside a bundle's proof (after its first line, its extra line,
    its index line or a hash) was reported as ``no valid 'index N' line`` or ``checkpoint body
    must be at least three non-empty lines``, naming no line. Rule: exit 2, naming the blank line
    (and, for a second blank line after the proof, that one)."""
    tmp_path, _, bundle = world
    head, _, note = bundle.partition("\n\n")
    lines = head.split("\n")
    assert len(lines) == 5  # header, extra, index, two hashes
    lines.insert(after + 1, "")
    (tmp_path / "p").write_text("\n".join(lines) + "\n\n" + note)
    capsys.readouterr()
    assert main(["audit", "verify-proof", "p", "--key", "log.pub"]) == 2
    assert capsys.readouterr().err == (
        f"agentgate: error: p: not a well-formed proof bundle: proof bundle {said}"
        + (" (the proof ends at its first blank line, where its checkpoint begins)" if after < 4 else "")
        + "\n"
    )


def test_a_well_formed_bundle_still_parses(world: tuple[Path, str, str]) -> None:
    """Review R66: the blank-line check reads a bundle as it was written."""
    _, _, bundle = world
    assert ProofBundle.parse(bundle).index == 1
    with pytest.raises(TamperDetected, match="line 4 is blank"):
        ProofBundle.parse(bundle.replace("\nindex 1\n", "\nindex 1\n\n", 1))


@pytest.mark.parametrize(
    ("index", "said"),
    [
        ("99999999999999999999", f"99999999999999999999 is {TOO_LARGE}"),
        ("1" * 21, f"111111111111111111111 is {TOO_LARGE}"),
        ("01", "'01' has a leading zero"),
        ("-1", "'-1' is not a decimal number"),
    ],
)
def test_verify_proof_names_the_index_line_and_what_is_wrong(
    world: tuple[Path, str, str], index: str, said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R66: a bundle's index line of 21 digits, a leading zero or a sign was refused as
    ``proof bundle has no valid 'index N' line``, naming neither the line nor what is wrong, and
    one of 20 digits above 2**64-1 was read and reported INVALID (exit 1) as a proof that did not
    verify. Rule: exit 2, naming line 3 (after the extra line) and what is wrong with it."""
    tmp_path, _, bundle = world
    (tmp_path / "p").write_text(bundle.replace("\nindex 1\n", f"\nindex {index}\n", 1))
    capsys.readouterr()
    assert main(["audit", "verify-proof", "p", "--key", "log.pub"]) == 2
    assert capsys.readouterr().err == (
        f"agentgate: error: p: not a well-formed proof bundle: proof bundle line 3 (index) {said}\n"
    )
