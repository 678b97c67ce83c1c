"""``agentgate audit explain``: how a chain's links show (revoked links with their expiry)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_audit_cli import audit_cli_store

from agentgate.authority import Chain, delegate, issue, record, revoke
from agentgate.cli._common import utc
from agentgate.cli.main import main
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog, open_log_key
from agentgate.store.grants import GrantRepository

ANCHOR, BOSS, ALICE, STRANGER = (SigningKey(bytes([n]) * 32) for n in (1, 2, 3, 4))


def _explained_entry(db: Path, *, revoked: bool = False) -> tuple[int, Chain, Chain]:
    """An allow entry whose chain (anchor -> boss -> alice) the grant store records, its root
    revoked when ``revoked``; the entry's index, the root grant and the chain."""
    root = issue(ANCHOR, BOSS.public, ["tool:search"], ttl=3600)
    child = delegate(root, BOSS, ALICE.public, ["tool:search"], ttl=600)
    with SQLiteStore(db) as store:
        grants = GrantRepository(store)
        record(grants, child)
        if revoked:
            revoke(grants, root.id)
        grants.close()
        index = AuditLog(store, open_log_key(store)).append(
            {"kind": "allow", "principal": ALICE.public.did, "chain_hash": child.id}
        )
    return index, root, child


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return audit_cli_store(tmp_path, monkeypatch)


def test_a_revoked_link_shows_its_expiry_beside_revoked(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review R55: audit explain showed a revoked link as "(REVOKED)" alone, its expiry dropped.
    Rule: a revoked link says REVOKED and its expiry, as every other link shows it (the grant
    store records the revoked grant only, so the link below it shows its expiry alone)."""
    index, root, child = _explained_entry(db, revoked=True)
    assert main(["audit", "explain", str(index)]) == 0
    out = capsys.readouterr().out
    assert (
        f"grant {root.id[:24]}: {ANCHOR.public.did} -> {BOSS.public.did} (REVOKED, expires {utc(root.expires)})"
        in out
    )
    tip = child.links[-1]
    assert f"grant {tip.id[:24]}: {BOSS.public.did} -> {ALICE.public.did} (expires {utc(tip.expires)})" in out
