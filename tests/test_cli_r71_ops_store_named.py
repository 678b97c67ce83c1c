"""An operator's mistyped PostgreSQL database: the refusal names the database it read.

Review R71 followed docs/operations.md as an operator with a shared PostgreSQL store, several
env files and two databases on one server. A store URL naming a database with none of
agentgate's tables (``.../postgres`` for ``.../agentgate``) is refused, as it must be, but the one
line said ``no store in the PostgreSQL database the store URL names``: which database, of which
env file, the operator had to guess, where the same command's line for a SQLite path names the
file, and its line for a server it cannot reach names the URL (password masked).
"""

from __future__ import annotations

from typing import Any

import pytest

from agentgate.cli.main import main

pytestmark = pytest.mark.postgres


def _with_password(url: str, password: str) -> str:
    """``url`` (``postgresql://USER@/DB?...``) with a password in its user part: the test server
    trusts local connections, so any password connects, and must never be printed."""
    return url.replace("@", f":{password}@", 1)


@pytest.mark.parametrize(
    "argv",
    [
        ["approval", "list"],
        ["audit", "verify", "--key", "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"],
        ["grant", "revoke", "a" * 64],
        ["store", "prune", "--older-than", "1d"],
    ],
    ids=["approval-list", "audit-verify", "grant-revoke", "store-prune"],
)
def test_a_database_without_a_store_is_named_in_the_refusal_password_masked(
    postgres_server: Any, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """Review R71: ``no store in the PostgreSQL database the store URL names`` named no database;
    the line now names it as the store's other errors do, the password masked, and still says
    what to do (check the name, or ``store init`` there as its owner)."""
    empty = postgres_server.create_database()
    database = empty.split("?")[0].rsplit("/", 1)[1]
    url = _with_password(empty, "s3cret-pw")
    assert main([*argv, "--store", url]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith("agentgate: error: no store in the PostgreSQL database postgresql://"), line
    assert f"/{database}?" in line and ":***@" in line, line
    assert "s3cret-pw" not in line
    assert "agentgate store init" in line and "(the database name)" in line, line
