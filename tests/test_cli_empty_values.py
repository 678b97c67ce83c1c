"""The command line: a value that names something may not be empty.

``--checkpoint "$SAVED"``, ``--key "$LOGPUB"``, ``--out "$FILE"`` or ``--store "$URL"`` with the
variable unset reached the command as an empty string, which it read as the flag left out: the
rollback check asked for was skipped (exit 0, intact), the private log key stood in for the
public key given, the signed approval went to standard output instead of a file, the default
store was opened or created. docs/cli.md: such a value is exit 2, one line naming the flag.
Real components: the ``agentgate`` entry point in process, real files, real SQLite stores.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agentgate.audit.entry import argument_digest
from agentgate.cli.main import main
from agentgate.gate import approval_call_hash
from agentgate.keys import SigningKey, save_key
from agentgate.store import open_store
from agentgate.store.audit import AuditLog, log_origin, open_log_key


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``agentgate argv``: its exit code (argparse's ``SystemExit`` included), stdout, stderr."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def append(store: Path, count: int) -> None:
    with open_store(str(store)) as opened:
        log = AuditLog(opened, open_log_key(opened, create=True), log_origin())
        for _ in range(count):
            log.append({"kind": "deny", "principal": "did:key:z6Mk-test", "reasons": ["test"]})


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A SQLite store with an audit entry and its log key (``log.key`` beside it), as
    ``AGENTGATE_STORE``; the working directory is an empty folder."""
    path = tmp_path / "db" / "store.db"
    path.parent.mkdir()
    monkeypatch.setenv("AGENTGATE_STORE", str(path))
    monkeypatch.delenv("AGENTGATE_LOG_KEY", raising=False)
    monkeypatch.delenv("AGENTGATE_LOG_ORIGIN", raising=False)
    monkeypatch.delenv("AGENTGATE_LOG_PREVIOUS_KEYS", raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    append(path, 1)
    return path


def test_an_empty_checkpoint_does_not_skip_the_rollback_check(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    older = tmp_path / "db" / "older.db"
    shutil.copy(store, older)
    append(store, 1)
    saved = tmp_path / "saved.txt"
    assert run(["audit", "checkpoint", "--out", str(saved)], capsys)[0] == 0
    store.unlink()
    older.rename(store)  # restored from the older copy: the saved checkpoint is newer than the log
    assert run(["audit", "verify", "--checkpoint", str(saved)], capsys)[0] == 1
    code, out, err = run(["audit", "verify", "--checkpoint", ""], capsys)
    assert (code, out) == (2, ""), out  # was exit 0, "intact", the check never made
    assert err.splitlines()[-1].startswith("agentgate: error: argument --checkpoint: ")


def test_an_empty_public_key_is_not_replaced_by_the_private_log_key(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(["audit", "verify", "--key", ""], capsys)
    assert (code, out) == (2, ""), out
    assert "argument --key: " in err.splitlines()[-1]


def test_an_empty_out_does_not_send_the_signed_approval_to_standard_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key, _ = save_key(SigningKey.generate(), tmp_path, "lead")
    request = {
        "id": "req-1",
        "expires_at": 4_000_000_000,
        "resource": "tool:refund",
        "action": "invoke",
        "args": {},
        "args_digest": argument_digest({}),
        "grant": "g" * 64,
        "call_id": "",
    }
    request["call_hash"] = approval_call_hash("tool:refund", "invoke", argument_digest({}), "g" * 64, "")
    payload = tmp_path / "payload.json"
    payload.write_text(json.dumps({"request": request}))
    code, out, err = run(["approval", "sign", str(payload), "--as", str(key), "--out", ""], capsys)
    assert (code, out) == (2, "")
    assert "argument --out: " in err.splitlines()[-1]


def test_an_empty_store_does_not_create_the_default_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("AGENTGATE_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    code, out, err = run(["store", "init", "--store", ""], capsys)
    assert (code, out) == (2, "")
    assert "argument --store: " in err.splitlines()[-1]
    assert not (tmp_path / ".agentgate").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["audit", "checkpoint", "--out", ""],
        ["audit", "show", "--principal", ""],
        ["audit", "show", "--tool", ""],
        ["audit", "show", "--store", ""],
        ["audit", "prove", "0", "--out", ""],
        ["audit", "report", "--out", ""],
        ["audit", "verify-proof", "", "--key", "log.pub"],
        ["approval", "list", "--store", ""],
        ["tasks", "dead-letters", "--tool", ""],
        ["tasks", "breakers", "--store", ""],
        ["tasks", "unsettled", "--store", ""],
        ["tasks", "settle", "k", "--ran", "--store", ""],
        ["broker", "leases", "--store", ""],
        ["broker", "inventory", "--inventory", ""],
        ["policy", "schema", "-o", ""],
        ["policy", "lint", ""],
        ["serve", "--policy", "p.yaml", "--inventory", "i.yaml", "--store", ""],
        ["keys", "new", "k", "--dir", ""],
        ["grant", "issue", "--issuer", "", "--to", "did:key:z", "--allow", "tool:x", "--ttl", "1h"],
        ["grant", "issue", "--issuer", "k.key", "--to", "", "--allow", "tool:x", "--ttl", "1h"],
        ["grant", "issue", "--issuer", "k.key", "--to", "a.pub", "--allow", "tool:x", "--out="],
        ["grant", "inspect", ""],
        ["grant", "check", "t.tok", "--as", "k.key", "--trust", "", "--tool", "x"],
        # Review R55: these three were a deny (exit 1) for no principal or tool, as if one were named.
        ["grant", "check", "t.tok", "--as", "k.key", "--trust", "r.pub", "--tool", ""],
        # Review R83: --model '' was decided as a call, a deny (exit 1), where --tool '' is exit 2.
        ["grant", "check", "t.tok", "--as", "k.key", "--trust", "r.pub", "--model", ""],
        ["policy", "explain", "p.yaml", "--as", "", "--tool", "x"],
        ["policy", "explain", "p.yaml", "--as", "a", "--tool", ""],
        ["grant", "revoke", ""],
    ],
    ids=lambda argv: " ".join(a or "''" for a in argv),
)
def test_an_empty_value_is_exit_2_naming_the_flag_and_nothing_is_written(
    store: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    before = store.read_bytes()
    code, out, err = run(argv, capsys)
    assert (code, out) == (2, ""), out
    last = err.splitlines()[-1]
    assert last.startswith("agentgate: error: argument ") and "empty value" in last, err
    assert "Traceback" not in err
    assert list(Path.cwd().iterdir()) == []  # no file, no default store
    assert store.read_bytes() == before  # no checkpoint signed, no grant recorded
