"""(From a review) ``agentgate approval list`` on both stores, and on a store that does not exist."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from agentgate.cli.main import main
from agentgate.store import Store
from agentgate.store.approvals import ApprovalStore


def _list(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(["approval", "list", *argv])
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_open_requests_order_votes_and_the_expiry_edge(store: Store) -> None:
    approvals = ApprovalStore(store)
    now = time.time()
    first = approvals.request("h1", "did:key:r", now + 300, quorum=3)
    second = approvals.request("h2", "did:key:r", now + 300, quorum=2)
    approvals.approve(second, "did:key:b")
    approvals.approve(second, "did:key:a")  # reaches quorum 2: approved, no longer open
    approvals.approve(first, "did:key:b")
    approvals.approve(first, "did:key:a")
    edge = approvals.request("h3", "did:key:r", now + 100)
    listed = approvals.open_records(now=now + 100)  # h3 expires exactly then: not open
    assert [(r.id, sorted(approvals.votes(r.id)[0])) for r in listed] == [(first, ["did:key:a", "did:key:b"])]
    assert edge not in {r.id for r in approvals.open_records(now=now + 200)}


@pytest.mark.postgres
def test_list_reads_a_postgresql_store(postgres_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    from agentgate.store._postgres import PostgresStore

    opened = PostgresStore(postgres_url)
    try:
        waiting = ApprovalStore(opened).request("h1", "did:key:r", time.time() + 300, quorum=2)
    finally:
        opened.close()
    code, out, err = _list(capsys, "--store", postgres_url, "--json")
    assert code == 0, err
    assert [row["id"] for row in json.loads(out)] == [waiting]


def test_listing_a_mistyped_store_path_does_not_report_an_empty_queue(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # open_store creates the file: a typo in --store prints "no open approval requests" (exit 0)
    # and leaves a new empty database behind; a human concludes nothing is waiting.
    typo = tmp_path / "agentgtae.db"
    code, out, err = _list(capsys, "--store", str(typo))
    assert not typo.exists()
    assert code == 2 and out == "" and err.count("\n") == 1, (code, out, err)
