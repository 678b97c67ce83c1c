"""Review R69 of a broker journal written before review R68's text rules.

Review R68 refused a ``gpu_type`` that is not ASCII (the KELVIN SIGN ``\u212a80`` was decided as
``gpu:k80``) and a NUL in a request's text. A journal written before then may hold such a lease or
waiting request; reading it back raised ``StoreError`` ("stored state is unreadable"), so an
upgraded broker could not start at all, nor could ``agentgate broker leases`` show anything.
Such a row is now set aside: ``load`` leaves it out of the state restored (the lease ends as one
lost in a restart would: its holder gets ``LeaseLost`` at its next renewal, ``GatedBroker.reconcile``
ends its decision as ``lease_lost``), names it (id, field, value, why) in ``set_aside`` and a
warning, and the CLI lists it. It is never restored under another type.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_broker_restart_budget import World, lease
from test_broker_store import FakeClock, busy_broker, empty_broker

from agentgate.errors import LeaseLost
from agentgate.store import SQLiteStore, Store
from agentgate.store.broker_leases import BrokerLeaseStore

KELVIN_80 = "\u212a80"


def _old_rows(path: Path, lease: dict[str, Any] | None = None, request: dict[str, Any] | None = None) -> None:
    """A busy broker's journal at ``path``, then rewritten with plain SQL as a version before
    review R68 could have written it: lease ``keep``'s request fields set to ``lease``, waiting
    request ``wait``'s to ``request``."""
    store = SQLiteStore(path)
    busy_broker(BrokerLeaseStore(store), FakeClock())
    store.close()
    import sqlite3

    db = sqlite3.connect(path)
    with db:
        for table, key, row_id, changes in (
            ("broker_leases", "lease_id", "keep", lease),
            ("broker_queue", "request_id", "wait", request),
        ):
            if not changes:
                continue
            (body,) = db.execute(f"SELECT body FROM {table} WHERE {key} = ?", (row_id,)).fetchone()
            data = json.loads(body)
            if table == "broker_leases":
                data["request"].update(changes)
                data["id"] = data["request"]["id"]
            else:
                data.update(changes)
            db.execute(
                f"UPDATE {table} SET body = ?, {key} = ?, tenant = ? WHERE {key} = ?",
                (json.dumps(data), data.get("id", data.get("request", {}).get("id")), _tenant(data), row_id),
            )
    db.close()


def _tenant(data: dict[str, Any]) -> str:
    return str(data["request"]["tenant"] if "request" in data else data["tenant"])


def test_a_lease_with_a_kelvin_sign_gpu_type_is_set_aside_and_the_broker_opens(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Review R69: a lease stored before review R68 with ``gpu_type`` ``\u212a80`` made the whole
    state unreadable (``StoreError``): the upgraded broker could not start. It is set aside,
    named with its field, value and why; the rest is restored; its GPUs are not kept for it and
    its holder's renewal is ``LeaseLost``: never restored as ``k80``."""
    path = tmp_path / "old.db"
    _old_rows(path, lease={"gpu_type": KELVIN_80})
    store = SQLiteStore(path)
    journal = BrokerLeaseStore(store)
    with caplog.at_level(logging.WARNING, logger="agentgate.broker"):
        saved = journal.load()
    assert saved is not None
    assert [lease.id for lease in saved.leases] == ["low"]
    assert [q.request.id for q in saved.queue] == ["high", "wait"]
    (aside,) = journal.set_aside
    assert (aside.kind, aside.id, aside.field, aside.value) == ("lease", "keep", "gpu_type", KELVIN_80)
    assert "U+212A KELVIN SIGN" in aside.why
    (record,) = [r for r in caplog.records if r.name == "agentgate.broker"]
    assert "'keep'" in record.getMessage() and "\\u212a80" in record.getMessage()
    clock = FakeClock()
    clock.now = saved.taken_at
    broker = empty_broker(journal, clock)
    broker.restore(saved)
    with pytest.raises(LeaseLost):
        broker.renew("keep")
    assert all(lease.request.gpu_type is None for lease in broker.leases())
    broker.advance()  # the restored broker writes: the row set aside is gone from the store
    assert journal.load() is not None and journal.set_aside == ()
    store.close()


@pytest.mark.parametrize("field", ["id", "tenant", "holder"])
def test_a_waiting_request_with_a_nul_is_set_aside(tmp_path: Path, field: str) -> None:
    """Review R69: a waiting request stored before review R68 with a NUL in its id, tenant or
    holder made the state unreadable; it is set aside, named, and the rest is restored."""
    path = tmp_path / "old.db"
    value = {"id": "wa\x00it", "tenant": "b\x00", "holder": "h\x00"}[field]
    _old_rows(path, request={field: value})
    store = SQLiteStore(path)
    journal = BrokerLeaseStore(store)
    saved = journal.load()
    assert saved is not None
    assert [q.request.id for q in saved.queue] == ["high"]
    (aside,) = journal.set_aside
    assert (aside.kind, aside.field, aside.value) == ("request", field, value)
    assert "NUL" in aside.why
    store.close()


def test_the_cli_lists_the_leases_and_names_the_row_set_aside(tmp_path: Path) -> None:
    """Review R69: ``agentgate broker leases`` on such a store failed (exit 2, "stored state is
    unreadable") and showed no lease; it shows the others and names the row set aside, in the
    table and in ``--json`` (``set_aside``)."""
    path = tmp_path / "old.db"
    _old_rows(path, lease={"gpu_type": KELVIN_80})
    base = [sys.executable, "-m", "agentgate", "broker", "leases", "--store", f"sqlite:///{path}"]
    table = subprocess.run(base, capture_output=True, text=True, check=False)
    assert table.returncode == 0, table.stderr
    assert "low" in table.stdout
    assert "set aside" in table.stdout and "'keep'" in table.stdout and "\\u212a80" in table.stdout
    shown = subprocess.run([*base, "--json"], capture_output=True, text=True, check=False)
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert [x["id"] for x in data["leases"]] == ["low"]
    (aside,) = data["set_aside"]
    assert aside["kind"] == "lease" and aside["id"] == "keep" and aside["field"] == "gpu_type"
    assert aside["value"] == KELVIN_80 and "KELVIN SIGN" in aside["why"]


def test_a_gated_lease_set_aside_is_ended_by_reconcile_as_lost_and_charged(store: Store) -> None:
    """Review R69: a gated lease stored before review R68 with a NUL in its holder made the
    restarted process fail at ``load`` (``StoreError``), its decision never settled. The lease is
    set aside and ``GatedBroker.reconcile`` ends its decision as ``lease_lost``, charged its
    reservation (it was granted), as for any lease a restart lost; on SQLite and PostgreSQL."""
    world = World(store.url)
    try:
        decision = world.process.gated.submit(world.trainer, lease("ft-1")).authorization.audit_index
        with world.process.store.transaction() as tx:  # as a version before review R68 wrote it
            (body,) = tx.execute("SELECT body FROM broker_leases WHERE lease_id = 'ft-1'")[0]
            data = json.loads(body)
            data["request"]["holder"] = "trainer\x00"
            tx.execute("UPDATE broker_leases SET body = ? WHERE lease_id = 'ft-1'", (json.dumps(data),))
        after = world.restart()
        assert after.broker.leases() == []
        assert after.gated.reconcile() == ["ft-1"]
        lost = after.entries()[-1]
        assert (lost.status, lost.ref, lost.budget_delta) == ("lease_lost", decision, 120_000)
        assert after.gate.verify().ok
    finally:
        world.process.gate.close()
