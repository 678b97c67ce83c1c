"""``agentgate store prune`` refuses, deleting nothing, when a part of the store it prunes is not
there and the role may not make it (PostgreSQL's application role after an upgrade added a
table, docs/operations.md, Upgrading): until review R63 it had deleted the parts before that one
(expired approval requests, settled reservations), then exited 2 without saying so."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from agentgate.cli.main import main
from agentgate.store.approvals import ApprovalStore

DOCS = Path(__file__).resolve().parent.parent / "docs"


@pytest.mark.postgres
def test_prune_with_a_part_missing_deletes_nothing(
    postgres_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R63: the application role (docs/operations.md's GRANTs) runs prune on a store whose
    dead letters table is missing: exit 2 naming it, and the expired request is still there."""
    from agentgate.store._postgres import PostgresStore

    url = postgres_server.create_database()
    assert main(["store", "init", "--store", url]) == 0
    role = "r63app_" + uuid.uuid4().hex[:8]
    page = (DOCS / "operations.md").read_text()
    block = page.index("```sql", page.index("grant the application role"))
    grants = page[block + 6 : page.index("```", block + 6)].replace("agentgate_app", role)
    with PostgresStore(url) as owner:
        expired = ApprovalStore(owner).request("call-old", "did:agent", time.time() - 7200)
        with owner.transaction() as tx:
            tx.execute(f"CREATE ROLE {role} LOGIN")
            tx.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
            for statement in filter(None, (s.strip() for s in grants.split(";"))):
                tx.execute(statement)
            tx.execute("DROP TABLE agentgate_dead_letters")  # as before an upgrade's store init
    app = url.replace(f"postgresql://{postgres_server.user}@", f"postgresql://{role}@")
    capsys.readouterr()
    assert main(["store", "prune", "--older-than", "1h", "--store", app]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "agentgate_dead_letters" in err, err
    with PostgresStore(url) as owner:
        assert owner.query("SELECT id FROM approvals") == [(expired,)]  # nothing pruned
