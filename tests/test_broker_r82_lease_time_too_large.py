"""Review R82: a stored lease time that is an integer too large for a float (``10**400`` in a
``broker_leases`` body) was an ``OverflowError`` traceback out of ``BrokerLeaseStore.load`` and
``agentgate broker leases`` (``math.isfinite`` raises it), not the refusal naming the field that
review R68 gave any other time that is no finite number. Now it is that refusal: unreadable state
(``MalformedRow``, a ``StoreError``) naming the row and the field; the CLI exits 2 with one line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_broker_store import FakeClock, busy_broker

from agentgate.cli.main import main
from agentgate.errors import MalformedRow
from agentgate.store import SQLiteStore
from agentgate.store.broker_leases import BrokerLeaseStore


@pytest.mark.parametrize("field", ["granted_at", "expires_at", "notice_deadline"])
def test_a_lease_time_too_large_for_a_float_is_refused_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str
) -> None:
    path = tmp_path / "agentgate.db"
    store = SQLiteStore(path)
    try:
        busy_broker(BrokerLeaseStore(store), FakeClock())
        with store.transaction() as tx:
            for lease_id, body in tx.execute("SELECT lease_id, body FROM broker_leases"):
                data = {**json.loads(body), field: 10**400}
                tx.execute(
                    "UPDATE broker_leases SET body = ? WHERE lease_id = ?", (json.dumps(data), lease_id)
                )
        with pytest.raises(
            MalformedRow, match=rf"broker_leases: the row of lease .*{field} must be a finite"
        ):
            BrokerLeaseStore(store).load()
    finally:
        store.close()
    code = main(["broker", "leases", "--store", str(path)])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and err.count("\n") == 1, (code, out, err[-500:])
    assert f"{field} must be a finite number" in err, err
