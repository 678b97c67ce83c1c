"""A malformed reservation row (agentgate/store/ledger.py, ``stored_reservation``; until review
R66 ``held._stored``) is named in a bounded line: its id and amount are quoted cut, as
``settle_held`` quotes an id it refuses.

Until review R62 the ``StoreError`` quoted the row's id and amount whole: an amount edited into
100,000 characters of text made an error of 100,000 characters (the CLI cut it; a library
caller's log did not)."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest
from test_cli_r62_budget_held_units import _killed_worker

from agentgate.errors import StoreError
from agentgate.store import SQLiteStore
from agentgate.store.held import held


def test_a_row_with_an_amount_of_100000_characters_is_named_in_a_short_line(tmp_path: Path) -> None:
    """Review R62: `held` of a row whose amount is 100,000 characters of text raises a
    `StoreError` that names the row and its amount, cut, in under 400 characters."""
    path = _killed_worker(tmp_path)
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("UPDATE budget_reservations SET amount = ?", ("9" * 50_000 + "x" * 50_000,))
        conn.commit()
    with SQLiteStore(path) as store, pytest.raises(StoreError) as caught:
        held(store, None, min_age_s=0)
    said = str(caught.value)
    assert said.startswith("budget_reservations: the row of reservation '") and "its amount is '999" in said
    assert len(said) < 400 and "\n" not in said, len(said)
