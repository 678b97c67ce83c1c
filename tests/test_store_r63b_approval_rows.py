"""An approval request's row edited outside agentgate (agentgate/store/approvals.py) is refused as
a ``StoreError`` naming the table, the request and the column, as agentgate/store/held.py refuses
a malformed reservation row (review R62), never a traceback.

Until review R63 ``open_records`` and ``get`` read ``quorum`` with ``int`` and ``expires_at`` with
``float`` whatever they held: SQLite's column checks let text through (``'x' >= 1`` holds, text
sorting above every number), and ``approval list`` exited 1 with a ``ValueError`` traceback. On
PostgreSQL the columns hold numbers only, but an ``expires_at`` of NaN sorts above every time: the
request was listed as open for good, its expiry shown as none."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from pathlib import Path

import pytest

from agentgate.cli.main import main
from agentgate.errors import InputError, StoreError
from agentgate.store import SQLiteStore, Store
from agentgate.store.approvals import ApprovalStore


def _edited(store: Store, column: str, value: str) -> str:
    """One open request, then its ``column`` set to ``value`` outside agentgate; its id."""
    approval_id = ApprovalStore(store).request("h1", "did:key:zRequester", time.time() + 300)
    with store.transaction() as tx:
        cast = "" if store.dialect == "sqlite" else "::double precision"  # text SQLite keeps as text
        tx.execute(f"UPDATE approvals SET {column} = ?{cast}", (value,))
    return approval_id


@pytest.mark.parametrize("column", ["quorum", "expires_at"])
def test_a_quorum_or_expiry_of_text_is_refused_naming_the_row(sqlite_store: SQLiteStore, column: str) -> None:
    """Review R63: a request whose ``quorum`` is ``'x'`` or whose ``expires_at`` is ``'zz'`` (SQLite's
    checks let both through) is a ``StoreError`` naming the table, the request and the column from
    ``open_records`` and ``get`` (until now a ``ValueError`` traceback)."""
    approval_id = _edited(sqlite_store, column, "x" * 100_000)
    approvals = ApprovalStore(sqlite_store)
    for read in (approvals.open_records, lambda: approvals.get(approval_id)):
        with pytest.raises(StoreError) as caught:
            read()
        said = str(caught.value)
        assert said.startswith(
            f"approvals: the row of request '{approval_id}' is malformed: its {column} is "
        ), said
        assert len(said) < 400 and "\n" not in said, len(said)


def test_an_expiry_of_nan_is_refused_not_open_for_good(store: Store) -> None:
    """Review R63: an ``expires_at`` edited to NaN (PostgreSQL's DOUBLE PRECISION holds it and sorts
    it above every time; SQLite's reads it as text) made a request that never expires, listed as
    open with no expiry shown. Now a ``StoreError`` naming the row."""
    approval_id = _edited(store, "expires_at", "NaN")
    approvals = ApprovalStore(store)
    for read in (approvals.open_records, lambda: approvals.get(approval_id)):
        with pytest.raises(
            StoreError, match=f"approvals: the row of request '{approval_id}' .*its expires_at"
        ):
            read()


def test_approval_list_says_a_damaged_row_in_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R63: ``approval list`` of a store whose request has a quorum of text is one line
    ``agentgate: error: ...`` naming the row, exit 2 (docs/cli.md, approval list), where it exited 1
    with a ValueError traceback."""
    path = tmp_path / "agentgate.db"
    with SQLiteStore(path) as store:
        approval_id = ApprovalStore(store).request("h1", "did:key:zRequester", time.time() + 300)
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("UPDATE approvals SET quorum = 'x'")
        db.commit()
    capsys.readouterr()
    assert main(["approval", "list", "--store", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, (out, err)
    assert err.startswith(f"agentgate: error: approvals: the row of request '{approval_id}' is malformed"), (
        err
    )


@pytest.mark.parametrize("expires_at", [float("nan"), float("inf"), "4000000000", True])
def test_a_request_with_an_expiry_that_is_no_time_is_refused_and_nothing_stored(
    store: Store, expires_at: object
) -> None:
    """Review R63 (r63b-rows's finding, the lead's fix): ``ApprovalStore.request`` stored
    ``float(expires_at)``: NaN made a request that never expires on PostgreSQL (reads refuse
    such a row now, but the write took it), and text or a bool was converted. Refused with the
    field named, nothing stored."""
    approvals = ApprovalStore(store)
    with pytest.raises(InputError, match="expires_at must be a finite number of Unix seconds"):
        approvals.request("h" * 64, "did:key:zRequester", expires_at)  # type: ignore[arg-type]
    assert store.query("SELECT COUNT(*) FROM approvals")[0][0] == 0
