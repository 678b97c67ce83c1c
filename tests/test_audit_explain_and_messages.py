"""Review r47, leftovers: mutants two earlier helpers left unrun (``AuditLog.explain``, the
reference index, key rotation; the CLI's durations, JSON arguments, empty values and errors;
the capability grammar and amounts), each settled here by a test that kills it where the
earlier tests let it live (the mutant each kills is named in its docstring).

Everything runs on real SQLite files and the real CLI entry point; the attacker drops the
append-only triggers first, as anyone with the database owner's rights can.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentgate.cli._common import utc
from agentgate.cli.main import main
from agentgate.errors import TamperDetected
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog

KEY = SigningKey(b"\x48" * 32)
ORIGIN = "r47.example/leftovers"
ALICE = "did:key:zAlice"


def _log(tmp_path: Path, n: int) -> AuditLog:
    log = AuditLog(SQLiteStore(tmp_path / "agentgate.db"), KEY, ORIGIN)
    for i in range(n):
        log.append({"kind": "allow", "principal": ALICE, "resource": "tool:t", "budget_delta": i})
    return log


def _attack(log: AuditLog, sql: str, params: tuple[object, ...] = ()) -> None:
    with log.store.transaction() as tx:
        for name in ("audit_log_next_index", "audit_log_no_update", "audit_log_no_delete"):
            tx.execute(f"DROP TRIGGER IF EXISTS {name}")
        tx.execute(sql, params)


# --- AuditLog.explain ---------------------------------------------------------------------------


def test_explain_refuses_an_unproven_row_holding_another_entry(tmp_path: Path) -> None:
    """Kills s18: ``explain`` dropping its check that each row holds the entry of its own index.
    Rule: an entry newer than the last checkpoint (no proof can catch it) copied over another
    row, leaf hash and all, is refused, never shown as the entry asked for."""
    log = _log(tmp_path, 3)
    assert log.explain(1).entry.index == 1
    _attack(
        log,
        "UPDATE audit_log SET entry = (SELECT entry FROM audit_log WHERE idx = 2), "
        "leaf_hash = (SELECT leaf_hash FROM audit_log WHERE idx = 2) WHERE idx = 1",
    )
    with pytest.raises(TamperDetected, match="entry 1 holds the entry of index 2"):
        log.explain(1)


def test_explain_lists_the_entry_at_the_checkpoint_size_as_unproven(tmp_path: Path) -> None:
    """Kills x6: ``_prove_included`` listing as unproven only the entries past the checkpoint's
    size (``idx > size``). Rule: the first entry after a checkpoint of size n (index n) is not
    in the signed tree, so explain says it is unproven, never that it is proven."""
    log = _log(tmp_path, 3)
    log.checkpoint()
    log.append({"kind": "outcome", "principal": ALICE, "ref": 2, "status": "ok"})
    shown = log.explain(3)
    assert shown.checkpoint is not None and shown.checkpoint.size == 3
    assert shown.unproven == (3,)
    assert [e.index for e in shown.related] == [2]


def test_explain_does_not_take_a_row_of_the_reference_index_as_evidence(tmp_path: Path) -> None:
    """Kills x2: ``_related`` keeping every row it reads (``idx != index`` only), not just the
    entries whose own ``ref`` is the one asked for. Rule: an ``audit_refs`` row pointed at an
    unrelated entry does not make explain show an entry that does not refer to it, and with
    the index dropped (a whole-log read) only the entries that refer to it are shown."""
    log = _log(tmp_path, 3)
    log.append({"kind": "outcome", "principal": ALICE, "ref": 1, "status": "ok"})
    log.checkpoint()
    assert log.refs_indexed
    assert [e.index for e in log.explain(2).related] == []
    with log.store.transaction() as tx:
        tx.execute("UPDATE audit_refs SET ref = 2 WHERE idx = 3")
    assert [e.index for e in log.explain(2).related] == []
    assert not log.verify().ok
    # A role that may not build the index opens the log with refs_indexed False: a whole-log read.
    again = AuditLog(log.store, KEY, ORIGIN)
    again.refs_indexed = False
    assert [e.index for e in again.explain(1).related] == [3]
    assert [e.index for e in again.explain(2).related] == []


# --- the CLI's one-line errors ------------------------------------------------------------------


def test_an_error_quoting_a_newline_is_one_line_with_white_space_runs_made_one_space(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Kills m2: ``_one_line`` cutting the text to 2,000 characters without collapsing its
    white space (a newline then shows as a ``\\n`` escape, and runs of spaces stay). Rule: an
    error is one line on stderr, each run of white space in it (newlines included) one space."""
    # A file that exists (a name with a line break that names no file is taken for a key's own
    # text since review R48, and not quoted at all), holding no key.
    odd = tmp_path / "no\n   key"
    odd.write_text("not a key\n")
    odd.chmod(0o600)
    code = main(["grant", "issue", "--issuer", str(odd), "--to", ALICE, "--allow", "tool:t", "--ttl", "1h"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.endswith("\n")
    assert f"{tmp_path}/no key: not a PKCS#8 PEM private key" in err
    assert "\\n" not in err and "  " not in err


# --- the CLI's helpers: bytes that are not UTF-8, times -----------------------------------------


def test_the_lowest_byte_that_is_not_utf8_is_named_as_a_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Kills y6: ``unprintable`` naming only ``\\udc81``..``\\udcff`` as bytes (``<`` for ``<=``),
    so a stray 0x80 is called a control character. Rule: every byte an argument holds that is
    not UTF-8, 0x80 included, is named as that byte."""
    assert main(["keys", "new", os.fsdecode(b"a\x80b"), "--dir", str(tmp_path / "k")]) == 2
    err = capsys.readouterr().err
    assert "a byte that is not UTF-8 (0x80)" in err and "control character" not in err
    assert not (tmp_path / "k").exists() or not list((tmp_path / "k").iterdir())


def test_a_time_no_calendar_holds_is_shown_as_a_dash() -> None:
    """Kills y9: ``utc`` returning ``utc_text``'s ``None`` for a time beyond the years a datetime
    holds. Rule: the CLI shows such a time as ``-``, always a string, never ``None``."""
    assert utc(0) == "1970-01-01T00:00:00Z"
    assert utc(1e20) == "-" and utc(-1e20) == "-"
    assert utc(float("inf")) == "-" and utc(None) == "-"
