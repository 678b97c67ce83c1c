"""Review R65: ``agentgate audit verify-proof`` given a forged proof bundle (a hash added, removed
or swapped, the index moved, the index at or past the signed size, an empty signed tree, another
entry's bytes, another key's or another log's checkpoint) says INVALID, exit 1, naming what failed
and where (the leaf index, the tree size), never ``valid`` and never a traceback; a bundle whose
entry cannot be read at all (nested past any entry, an integer longer than Python converts) is
unusable input, exit 2 (agentgate/audit/proof.py, agentgate/audit/merkle.py, cli/audit.py)."""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path

import pytest

from agentgate.audit.entry import AuditEntry
from agentgate.audit.merkle import EMPTY_ROOT
from agentgate.audit.note import Checkpoint, sign_checkpoint
from agentgate.cli.main import main
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog

KEY = SigningKey(b"\x67" * 32)
OTHER_KEY = SigningKey(b"\x68" * 32)
ORIGIN = "r65.example/audit"
OTHER_ORIGIN = "r65.example/other"
SIZE = 7
INDEX = 3


def _bundle(tmp_path: Path, key: SigningKey = KEY, origin: str = ORIGIN) -> str:
    with SQLiteStore(tmp_path / f"{key.public.did[-6:]}-{origin.replace('/', '_')}.db") as store:
        log = AuditLog(store, key, origin)
        for i in range(SIZE):
            kind = "deny" if i == INDEX else "allow"
            log.append({"kind": kind, "principal": "did:key:zAlice", "resource": "tool:t", "budget_delta": i})
        return log.prove(INDEX).text()


def _lines(edit: Callable[[list[str]], list[str]]) -> Callable[[str], str]:
    """A forgery that edits the bundle's head lines (header, extra, index, hashes)."""

    def forge(text: str) -> str:
        head, note = text.split("\n\n", 1)
        return "\n".join(edit(head.split("\n"))) + "\n\n" + note

    return forge


def _index(value: str) -> Callable[[str], str]:
    return _lines(lambda lines: [*lines[:2], f"index {value}", *lines[3:]])


def _allowed(text: str) -> str:
    """The entry at INDEX turned from a deny into an allow, its index kept, proof and note kept."""
    head, note = text.split("\n\n", 1)
    lines = head.split("\n")
    entry = AuditEntry.from_bytes(base64.b64decode(lines[1].removeprefix("extra ")))
    forged = entry.model_copy(update={"kind": "allow"}).to_bytes()
    return "\n".join([lines[0], "extra " + base64.b64encode(forged).decode(), *lines[2:]]) + "\n\n" + note


def _empty_tree(text: str) -> str:
    head = text.split("\n\n", 1)[0].split("\n")
    return (
        "\n".join([*head[:2], "index 0"]) + "\n\n" + sign_checkpoint(Checkpoint(ORIGIN, 0, EMPTY_ROOT), KEY)
    )


def _entry_bytes(data: bytes) -> Callable[[str], str]:
    return _lines(lambda lines: [lines[0], "extra " + base64.b64encode(data).decode(), *lines[2:]])


INVALID: list[tuple[str, Callable[[str], str], str]] = [
    ("hash-added", _lines(lambda ls: [*ls, ls[3]]), "inclusion proof is longer than the tree is deep"),
    ("hash-removed", _lines(lambda ls: ls[:-1]), "inclusion proof is shorter than the tree is deep"),
    (
        "hashes-swapped",
        _lines(lambda ls: [*ls[:3], ls[4], ls[3], *ls[5:]]),
        f"inclusion proof for leaf {INDEX} does not lead to the root of size {SIZE}",
    ),
    (
        "hash-33-bytes",
        _lines(lambda ls: [*ls[:3], base64.b64encode(base64.b64decode(ls[3]) + b"\x00").decode(), *ls[4:]]),
        "proof hash 0 is 33 bytes, not 32",
    ),
    ("index-moved", _index("4"), f"inclusion proof for leaf 4 does not lead to the root of size {SIZE}"),
    ("index-at-size", _index(str(SIZE)), f"leaf index {SIZE} is outside a tree of size {SIZE}"),
    # 2**64-1, the largest index the format holds (a larger one is a malformed bundle, review R66)
    ("index-20-digits", _index(str(2**64 - 1)), f"leaf index {2**64 - 1} is outside a tree of size {SIZE}"),
    ("empty-signed-tree", _empty_tree, "leaf index 0 is outside a tree of size 0"),
    (
        "decision-edited",
        _allowed,
        f"inclusion proof for leaf {INDEX} does not lead to the root of size {SIZE}",
    ),
]


@pytest.mark.parametrize(("forge", "said"), [pytest.param(f, s, id=i) for i, f, s in INVALID])
def test_a_forged_bundle_is_invalid_naming_what_failed(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    forge: Callable[[str], str],
    said: str,
) -> None:
    """Review R65: each forgery of a genuine bundle is INVALID, exit 1, with the check that failed
    and the leaf index or tree size it failed at."""
    monkeypatch.setattr("agentgate.cli.main.GROUPS", ("agentgate.cli.audit",))
    genuine = _bundle(tmp_path)
    pub = tmp_path / "log.pub"
    pub.write_text(KEY.public.did + "\n")
    bundle = tmp_path / "entry.tlog-proof"
    bundle.write_text(genuine)
    assert main(["audit", "verify-proof", str(bundle), "--key", str(pub)]) == 0
    bundle.write_text(forge(genuine))
    capsys.readouterr()
    assert main(["audit", "verify-proof", str(bundle), "--key", str(pub)]) == 1
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == (f"INVALID: {said}\n", "")


def test_a_bundle_of_another_key_or_another_log_is_invalid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R65: a genuine bundle of another log key, or of another log (origin) signed by the
    right key, is INVALID under the log's key and origin, naming the key ids or the origins."""
    monkeypatch.setattr("agentgate.cli.main.GROUPS", ("agentgate.cli.audit",))
    pub = tmp_path / "log.pub"
    pub.write_text(KEY.public.did + "\n")
    bundle = tmp_path / "entry.tlog-proof"
    bundle.write_text(_bundle(tmp_path, key=OTHER_KEY))
    capsys.readouterr()
    assert main(["audit", "verify-proof", str(bundle), "--key", str(pub)]) == 1
    assert capsys.readouterr().out.startswith(
        f"INVALID: note carries no signature by the log key {ORIGIN} (key id "
    )
    bundle.write_text(_bundle(tmp_path, origin=OTHER_ORIGIN))
    assert main(["audit", "verify-proof", str(bundle), "--key", str(pub), "--origin", ORIGIN]) == 1
    assert (
        capsys.readouterr().out == f"INVALID: checkpoint is for log {OTHER_ORIGIN!r}, expected {ORIGIN!r}\n"
    )


@pytest.mark.parametrize(
    ("data", "said"),
    [
        pytest.param(
            b"[" * 100_000 + b"]" * 100_000, "entry bytes are nested too deep to be an entry", id="nested"
        ),
        pytest.param(b'{"index":' + b"9" * 5000 + b"}", "entry bytes are not UTF-8 JSON: ", id="5000-digits"),
        pytest.param(b"\xff\xfe", "entry bytes are not UTF-8 JSON: ", id="not-utf8"),
    ],
)
def test_a_bundle_whose_entry_cannot_be_read_is_unusable_input(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    data: bytes,
    said: str,
) -> None:
    """Review R65: an ``extra`` line whose entry is nested 100,000 deep, holds an integer of 5,000
    digits or is not UTF-8 is unusable input, exit 2, one line naming the file: no traceback."""
    monkeypatch.setattr("agentgate.cli.main.GROUPS", ("agentgate.cli.audit",))
    pub = tmp_path / "log.pub"
    pub.write_text(KEY.public.did + "\n")
    bundle = tmp_path / "entry.tlog-proof"
    bundle.write_text(_entry_bytes(data)(_bundle(tmp_path)))
    capsys.readouterr()
    assert main(["audit", "verify-proof", str(bundle), "--key", str(pub)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"agentgate: error: {bundle}: not a well-formed proof bundle: {said}")
    assert captured.err.count("\n") == 1
