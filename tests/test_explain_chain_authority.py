"""``agentgate audit explain``: how a chain's links and its root show (revoked links with their
expiry, the root issuer against the trust anchors given with ``--trust``)."""

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
    Rule: a revoked link says REVOKED and its expiry, as every other link shows it (the link
    below it is revoked through it: test_a_link_below_a_revoked_one_is_shown_revoked_through_it)."""
    index, root, child = _explained_entry(db, revoked=True)
    assert main(["audit", "explain", str(index)]) == 0
    out = capsys.readouterr().out
    assert (
        f"grant {root.id[:24]}: {ANCHOR.public.did} -> {BOSS.public.did} (REVOKED, expires {utc(root.expires)})"
        in out
    )
    tip = child.links[-1]
    assert (
        f"grant {tip.id[:24]}: {BOSS.public.did} -> {ALICE.public.did} "
        f"(revoked through grant {root.id[:24]}..., expires {utc(tip.expires)})" in out
    )


def test_a_link_below_a_revoked_one_is_shown_revoked_through_it(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R55: audit explain showed a descendant of a revoked grant with its expiry only (the
    grant store records only the grant revoked; the cascade is applied at decision time), as if
    it still held. Rule: each link below a revoked one is shown revoked through it; links above
    it are not."""
    root = issue(ANCHOR, BOSS.public, ["tool:search"], ttl=3600)
    middle = delegate(root, BOSS, ALICE.public, ["tool:search"], ttl=600)
    chain = delegate(middle, ALICE, STRANGER.public, ["tool:search"], ttl=300)
    with SQLiteStore(db) as store:
        grants = GrantRepository(store)
        record(grants, chain)
        revoke(grants, middle.id)
        grants.close()
        index = AuditLog(store, open_log_key(store)).append(
            {"kind": "allow", "principal": STRANGER.public.did, "chain_hash": chain.id}
        )
    assert main(["audit", "explain", str(index)]) == 0
    out = capsys.readouterr().out
    first, second, tip = chain.links
    assert (
        f"grant {first.id[:24]}: {ANCHOR.public.did} -> {BOSS.public.did} (expires {utc(first.expires)})"
        in out
    )
    assert f"{BOSS.public.did} -> {ALICE.public.did} (REVOKED, expires {utc(second.expires)})" in out
    assert (
        f"grant {tip.id[:24]}: {ALICE.public.did} -> {STRANGER.public.did} "
        f"(revoked through grant {second.id[:24]}..., expires {utc(tip.expires)})" in out
    )


def test_explain_says_whether_the_root_issuer_is_a_trust_anchor_given(
    db: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Review R55: audit explain never checked that a chain's root issuer is a trust anchor (it
    reads no policy), and said nothing about it. Rule: with ``--trust PUBFILE|DID`` (repeatable,
    as ``grant check`` names anchors) it says whether the root issuer is one of them; without,
    that it was not checked."""
    index, _, _ = _explained_entry(db)
    anchor_file = tmp_path / "anchor.pub"
    anchor_file.write_text(ANCHOR.public.did + "\n")
    root = ANCHOR.public.did

    assert main(["audit", "explain", str(index)]) == 0
    out = capsys.readouterr().out
    assert f"root issuer {root}: not checked against trust anchors (give --trust PUBFILE|DID)" in out

    assert (
        main(["audit", "explain", str(index), "--trust", STRANGER.public.did, "--trust", str(anchor_file)])
        == 0
    )
    out = capsys.readouterr().out
    assert f"root issuer {root}: a trust anchor given with --trust" in out

    assert main(["audit", "explain", str(index), "--trust", STRANGER.public.did]) == 0
    out = capsys.readouterr().out
    assert f"root issuer {root}: NOT one of the trust anchors given with --trust" in out


def test_explain_checks_no_anchor_for_a_chain_not_bound_to_the_entry(
    db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A chain shown from the grant store's rows only (its token's tip is another grant) has no
    signed root to check: explain says so rather than judge the store's word."""
    index, _, child = _explained_entry(db)
    other = issue(ANCHOR, ALICE.public, ["tool:search"], ttl=3600)
    with SQLiteStore(db) as store, store.transaction() as tx:
        tx.execute("UPDATE agentgate_grants SET token = ? WHERE id = ?", (other.token, child.id))
    assert main(["audit", "explain", str(index), "--trust", ANCHOR.public.did]) == 0
    out = capsys.readouterr().out
    assert "NOT bound to this entry" in out
    assert "root issuer: not checked (the chain is not bound to this entry)" in out
    assert "a trust anchor given" not in out


@pytest.mark.parametrize("trust", ["did:key:zNotAKey", "missing.pub"])
def test_a_trust_anchor_that_is_no_key_is_refused_before_anything_is_read(
    db: Path, capsys: pytest.CaptureFixture[str], trust: str
) -> None:
    index, _, _ = _explained_entry(db)
    assert main(["audit", "explain", str(index), "--trust", trust]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err and captured.err.count("\n") == 1
