"""``accept_repair`` refuses an id with a typed refusal, ``RepairRefused``, that the CLI catches exactly.

Until review R60 ``agentgate audit accept-repair`` caught every ``InputError`` of ``accept_repair``
as a refusal of the id (exit 1, ``REFUSED: ...``), exact only because the command checked
``--by`` and ``--reason`` first: a library caller could not tell "no such repair" from "blank
--by", and any other ``InputError`` raised inside would have been reported as a refused id. Rules
checked here: an id that names no repair, one accepted already, and a store that records no repair
raise ``RepairRefused`` (an ``InputError``); a blank ``by`` or ``reason`` raises a plain
``InputError``, not a refusal; the CLI's exit codes stay (1 refused, 2 unusable input).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from test_audit_r57_repairs import ENTRY, KEY, ORIGIN

from agentgate.errors import InputError, RepairRefused
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog
from agentgate.store.audit._schema import accept_repair


def _repaired(db: Path) -> None:
    """A log of three entries whose trigger audit_log_no_update was dropped, and repair 1 recorded."""
    with SQLiteStore(db) as store:
        AuditLog(store, KEY, ORIGIN).append_many([ENTRY] * 3)
    raw = sqlite3.connect(db)
    raw.execute("DROP TRIGGER audit_log_no_update")
    raw.commit()
    raw.close()
    with SQLiteStore(db) as store:
        AuditLog(store, KEY, ORIGIN)  # a writer's opening puts it back and records repair 1


def test_an_id_accept_repair_refuses_raises_repair_refused(tmp_path: Path) -> None:
    """Review R60: accept_repair refused an id with the plain InputError a blank --by raised too."""
    db = tmp_path / "agentgate.db"
    _repaired(db)
    with SQLiteStore(db) as store:
        with pytest.raises(RepairRefused, match=r"^audit_repairs holds no repair 7$"):
            accept_repair(store, 7, "Ana", "checked")
        for by, reason in (("  ", "checked"), ("Ana", "")):
            with pytest.raises(InputError) as blank:
                accept_repair(store, 1, by, reason)
            assert not isinstance(blank.value, RepairRefused)
        assert accept_repair(store, 1, "Ana", "checked").startswith("repair 1 (")
        with pytest.raises(RepairRefused, match=r"^repair 1 was accepted already$"):
            accept_repair(store, 1, "Ana", "again")
        assert store.query("SELECT COUNT(*) FROM audit_repairs")[0][0] == 2  # the repair and one acceptance


def test_a_store_that_records_no_repair_is_a_refusal(tmp_path: Path) -> None:
    """Review R60: a store without audit_repairs refused accept_repair with a plain InputError."""
    db = tmp_path / "agentgate.db"
    with SQLiteStore(db) as store:
        store.query("CREATE TABLE unrelated (x INTEGER)")
        with pytest.raises(RepairRefused, match=r"^this store records no repair"):
            accept_repair(store, 1, "Ana", "checked")
