"""Review R94: Python's base64 decoder ignores the unused bits of the character before the ``=``
padding (and padding added after a full group), so a proof bundle or saved checkpoint whose hash,
entry or signature line was edited that way still verified: two different files were the same
evidence. Every base64 line of a bundle or signed checkpoint must now be the one canonical
encoding of its bytes (``canonical_base64``, agentgate/audit/note.py), or it is ``TamperDetected``
naming the line (docs/audit-format.md, sections 3 and 4)."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from test_audit_r66_checkpoint_lines import KEY, ORIGIN, world  # noqa: F401  (the fixture)

from agentgate.audit.note import Checkpoint, canonical_base64, open_checkpoint, sign_note
from agentgate.audit.proof import ProofBundle, verify_bundle
from agentgate.cli.main import main
from agentgate.errors import TamperDetected
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog

_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _noncanonical(text: str) -> str:
    """Another text that Python's ``b64decode(validate=True)`` reads as the same bytes as
    ``text``: an unused bit before the padding set, or ``=`` added after a full group."""
    data = text.rstrip("=")
    if data == text:
        edited = text + "="
    else:
        edited = data[:-1] + _ALPHABET[_ALPHABET.index(data[-1]) ^ 1] + text[len(data) :]
    assert edited != text
    assert base64.b64decode(edited, validate=True) == base64.b64decode(text, validate=True)
    return edited


def _edit_line(text: str, number: int, edit: str) -> str:
    """``text`` with line ``number`` (from 1), a base64 line, made non-canonical; ``edit`` is
    ``"whole"`` for a line that is base64, ``"last word"`` for one whose last word is."""
    lines = text.split("\n")
    head, _, word = lines[number - 1].rpartition(" ") if edit == "last word" else ("", "", lines[number - 1])
    lines[number - 1] = (head + " " if head else "") + _noncanonical(word)
    return "\n".join(lines)


@pytest.mark.parametrize(
    ("line", "what"),
    [(2, "extra"), (4, "proof hash"), (5, "proof hash")],
)
def test_a_bundle_line_that_is_not_canonical_base64_is_refused_naming_it(
    world: tuple[Path, str, str],  # noqa: F811
    line: int,
    what: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    tmp_path, _, bundle = world
    verify_bundle(bundle, KEY.public)  # the bundle as written verifies
    edited = _edit_line(bundle, line, "last word" if what == "extra" else "whole")
    with pytest.raises(
        TamperDetected, match=rf"^proof bundle line {line} \({what}\) is not canonical base64"
    ):
        ProofBundle.parse(edited)
    (tmp_path / "p").write_text(edited)
    capsys.readouterr()
    assert main(["audit", "verify-proof", "p", "--key", "log.pub"]) == 2
    assert f"proof bundle line {line} ({what}) is not canonical base64" in capsys.readouterr().err


def test_a_signature_line_that_is_not_canonical_base64_does_not_verify(
    world: tuple[Path, str, str],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    tmp_path, _, bundle = world
    last = len(bundle.split("\n")) - 1  # the signature line; the text ends in a newline
    edited = _edit_line(bundle, last, "last word")
    with pytest.raises(
        TamperDetected, match=r"^signature line '— r66\.example/audit .*' is not canonical base64"
    ):
        verify_bundle(edited, KEY.public)
    (tmp_path / "p").write_text(edited)
    capsys.readouterr()
    assert main(["audit", "verify-proof", "p", "--key", "log.pub"]) == 1
    assert "is not canonical base64" in capsys.readouterr().out


def test_a_saved_checkpoint_whose_signature_line_is_not_canonical_is_refused(
    world: tuple[Path, str, str],  # noqa: F811
) -> None:
    tmp_path, _, _ = world
    with SQLiteStore(tmp_path / "agentgate.db") as store:
        log = AuditLog(store, KEY, ORIGIN)
        note = log.checkpoint()
        edited = _edit_line(note, len(note.split("\n")) - 1, "last word")
        open_checkpoint(note, KEY.public)
        with pytest.raises(TamperDetected, match="is not canonical base64"):
            open_checkpoint(edited, KEY.public)
        assert log.verify(note).ok
        report = log.verify(edited)
    assert not report.ok
    assert any("is not canonical base64" in problem for problem in report.problems)


def test_a_checkpoint_root_line_that_is_not_canonical_base64_is_refused_naming_it(
    world: tuple[Path, str, str],  # noqa: F811
) -> None:
    _, root, _ = world
    body = f"{ORIGIN}\n3\n{_noncanonical(root)}\n"
    with pytest.raises(TamperDetected, match=r"^checkpoint line 3 \(root hash\) is not canonical base64"):
        Checkpoint.parse(body)
    with pytest.raises(TamperDetected, match=r"^checkpoint line 3 \(root hash\) is not canonical base64"):
        open_checkpoint(sign_note(body, KEY, ORIGIN), KEY.public)


@pytest.mark.parametrize("text", ["AB==", "AAB=", "AAAA=", "AAAA===="])
def test_canonical_base64_refuses_every_other_text_of_the_same_bytes(text: str) -> None:
    with pytest.raises(TamperDetected, match=r"^line 9 is not canonical base64 .* written 'A"):
        canonical_base64(text, "line 9")


@pytest.mark.parametrize("text", ["", "AA==", "AAA=", "AAAA", "/+8="])
def test_canonical_base64_reads_the_encoding_b64encode_writes(text: str) -> None:
    assert canonical_base64(text, "line 9") == base64.b64decode(text)


def test_text_that_is_not_base64_is_still_named_so() -> None:
    with pytest.raises(TamperDetected, match=r"^line 9 is not base64$"):
        canonical_base64("not base64!", "line 9")
