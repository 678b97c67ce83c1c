"""Review R83: ``ApprovalStore.request`` refuses an expiry outside 1970 to ``LATEST_EXPIRY`` (the
year 5138), the times ``approval sign`` signs, with ``InputError`` naming it, nothing stored: until
R83 an expiry of ``1e300`` was stored, ``approval list`` showed it as a request with no expiry
(``-``, the display review R82 removed for infinity) and ``approval sign`` refused its payload as
malformed."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.cli.main import main
from agentgate.errors import InputError
from agentgate.store import SQLiteStore
from agentgate.store.approvals import ApprovalStore

LATEST_EXPIRY = 10**11
"""``agentgate._time.LATEST_EXPIRY``, as docs/cli.md gives it: the year 5138."""


@pytest.mark.parametrize("expires_at", [1e300, LATEST_EXPIRY, float(LATEST_EXPIRY), -1.0])
def test_an_expiry_no_approval_can_be_signed_for_is_refused_nothing_stored(
    tmp_path: Path, expires_at: float
) -> None:
    with SQLiteStore(tmp_path / "ag.db") as store:
        approvals = ApprovalStore(store)
        with pytest.raises(InputError, match="expires_at must be a time in Unix seconds from 0 to"):
            approvals.request("h" * 64, "did:key:zRequester", expires_at)
        assert store.query("SELECT COUNT(*) FROM approvals") == [(0,)]


def test_the_latest_expiry_stored_is_listed_with_its_date(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ag.db"
    with SQLiteStore(path) as store:
        ApprovalStore(store).request("h" * 64, "did:key:zRequester", LATEST_EXPIRY - 1)
    assert main(["approval", "list", "--store", str(path)]) == 0
    assert "5138-11-16T09:46:39Z" in capsys.readouterr().out
