"""Review R88: a stored entry holding a lone-surrogate escape (``"\\ud800"`` in ``reasons``, an
``args`` key or value, ``resource``, ``status``, ``rule`` or ``approver``) passed the field
validators, and ``AuditEntry.from_bytes`` then failed re-encoding it for its canonical check with
an ``InputError`` that no reader of the log catches: ``verify`` raised (it never raises for a
tampered log), ``audit verify`` exited 2 with the bare encoder message and no verdict, and
``show``, ``explain``, ``report``, ``checkpoint``, ``entry`` and ``entries(skip_malformed=True)``
stopped likewise; ``verify-proof`` on a bundle carrying such an entry did not name the file. Rule:
such bytes are not a canonical entry: ``TamperDetected``, and each reader says so in its words
(agentgate/audit/entry.py)."""

from __future__ import annotations

import base64
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_audit_r66_checkpoint_lines import world  # noqa: F401  (the fixture: a log, its key, a bundle)

from agentgate.audit.entry import AuditEntry, encode_entry
from agentgate.audit.merkle import leaf_hash
from agentgate.cli.main import main
from agentgate.errors import TamperDetected
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog, open_log_key

ORIGIN = "r88.example/audit"
_DENY = encode_entry(
    {
        "index": 1,
        "time": "2026-11-29T10:15:00.000000Z",
        "kind": "deny",
        "principal": "did:key:zA",
        "reasons": ["x"],
    }
)
SURROGATE = _DENY.replace(b'"reasons":["x"]', b'"reasons":["\\ud800"]')
"""Entry 1, a deny whose one reason is a lone-surrogate escape."""


@pytest.mark.parametrize(
    ("field", "stored"),
    [
        (b'"reasons":["x"]', b'"reasons":["\\ud800"]'),
        (b'"args":{}', b'"args":{"\\ud800":1}'),
        (b'"args":{}', b'"args":{"a":{"b":"\\udfff"}}'),
        (b'"resource":null', b'"resource":"\\ud800"'),
        (b'"status":null', b'"status":"\\ud800"'),
        (b'"rule":null', b'"rule":"\\ud800"'),
        (b'"approver":null', b'"approver":"\\ud800"'),
    ],
    ids=["reasons", "args-key", "args-value", "resource", "status", "rule", "approver"],
)
def test_an_entry_holding_a_lone_surrogate_is_not_canonical(field: bytes, stored: bytes) -> None:
    data = _DENY.replace(field, stored)
    assert data != _DENY
    with pytest.raises(TamperDetected, match=r"^entry 1 is not in canonical form: .*not valid Unicode"):
        AuditEntry.from_bytes(data)


def audit_verbs_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The audit verbs alone, run in ``tmp_path`` on its agentgate.db, log key log.key and origin
    ``ORIGIN``; the database's path."""
    db = tmp_path / "agentgate.db"
    monkeypatch.setattr("agentgate.cli.main.GROUPS", ("agentgate.cli.audit",))
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "log.key"))
    monkeypatch.setenv("AGENTGATE_STORE", str(db))
    monkeypatch.chdir(tmp_path)
    return db


@pytest.fixture
def tampered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[AuditLog]:
    """A checkpointed log of one allow (its key log.key, log.pub beside it), then ``SURROGATE``
    appended at index 1 by a plain INSERT (what the append-only triggers allow any writer); the
    audit verbs pointed at it."""
    db = audit_verbs_in(tmp_path, monkeypatch)
    with SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store), ORIGIN)
        log.append({"kind": "allow", "principal": "did:key:zA", "resource": "tool:x"})
        log.checkpoint()
    with sqlite3.connect(db) as con:
        con.execute(
            "INSERT INTO audit_log (idx, entry, leaf_hash) VALUES (1, ?, ?)",
            (SURROGATE, leaf_hash(SURROGATE)),
        )
    con.close()
    store = SQLiteStore(db)
    yield AuditLog(store, open_log_key(store, create=False), ORIGIN, create=False)
    store.close()


def test_the_log_reports_such_an_entry_as_tampered(tampered: AuditLog) -> None:
    report = tampered.verify()
    assert not report.ok
    assert report.first_bad_index == 1
    assert "entry 1: is not a canonical entry (bytes written outside agentgate)" in report.problems
    malformed = "^audit log: entry 1 is malformed: entry 1 is not in canonical form: "
    with pytest.raises(TamperDetected, match=malformed):
        tampered.entry(1)
    with pytest.raises(TamperDetected, match=malformed):
        list(tampered.entries())
    assert [entry.index for entry in tampered.entries(skip_malformed=True)] == [0]


def test_the_audit_verbs_report_such_an_entry(tampered: AuditLog, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["audit", "verify", "--key", "log.pub"]) == 1
    out, _ = capsys.readouterr()
    assert out.startswith("TAMPERED: 1 problem(s)\nfirst bad index: 1\n")
    assert main(["audit", "show"]) == 2
    _, err = capsys.readouterr()
    assert err.startswith(
        "agentgate: error: audit log: entry 1 is malformed: entry 1 is not in canonical form: "
    )
    assert main(["audit", "explain", "1"]) == 1
    out, _ = capsys.readouterr()
    assert out.startswith("REFUSED: audit log: entry 1 is malformed: ")
    assert main(["audit", "report", "--out", "r.html"]) == 1
    out, _ = capsys.readouterr()
    assert "2 entries, TAMPERED, 1 problem(s) shown in the report" in out
    assert main(["audit", "checkpoint"]) == 1
    out, _ = capsys.readouterr()
    assert out.startswith("REFUSED: audit log: entry 1 is not a canonical entry")


def test_verify_proof_names_the_bundle_whose_entry_holds_a_lone_surrogate(
    world: tuple[Path, str, str],  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    tmp_path, _, bundle = world
    lines = bundle.split("\n")
    assert lines[1].startswith("extra ")
    entry = base64.b64decode(lines[1].removeprefix("extra "))
    forged = entry.replace(b'"reasons":[]', b'"reasons":["\\ud800"]')
    assert forged != entry
    lines[1] = "extra " + base64.b64encode(forged).decode()
    (tmp_path / "p").write_text("\n".join(lines))
    capsys.readouterr()
    assert main(["audit", "verify-proof", "p", "--key", "log.pub"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(
        "agentgate: error: p: not a well-formed proof bundle: entry 1 is not in canonical form: "
    )
