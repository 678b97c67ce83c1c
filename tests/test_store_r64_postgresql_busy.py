"""A PostgreSQL store whose table another session holds locked past ``lock_timeout`` makes a verb
that writes fail with one line saying the store is busy, locked by another session, naming the
store (without its password) and ``lock_timeout``, and that nothing was written, as the SQLite
store says of its write lock (tests/test_store_r64_sqlite_busy.py). Until review R64 the line was
``PostgreSQL error: canceling statement due to lock timeout (SQLSTATE 55P03)``, and the store was
not named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from agentgate.cli.main import main

pytestmark = pytest.mark.postgres

GRANT = "ab" * 32


def _short(url: str) -> str:
    """``url`` with a lock_timeout of 200 ms, set as docs/operations.md says a user sets it."""
    return url + ("&" if "?" in url else "?") + "options=-c%20lock_timeout%3D200ms"


@pytest.mark.parametrize(
    ("table", "verb"),
    [
        ("agentgate_revocations", ["grant", "revoke", GRANT]),
        ("agentgate_dead_letters", ["store", "prune", "--older-than", "30d"]),
    ],
    ids=["grant-revoke", "store-prune"],
)
def test_a_verb_meeting_a_lock_another_session_holds_says_the_store_is_busy(
    postgres_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    table: str,
    verb: list[str],
) -> None:
    """Review R64: exit 2, one line: busy, locked by another session, lock_timeout, nothing
    written; the revocation is not there."""
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "log.key"))
    assert main(["store", "init", "--store", postgres_url]) == 0
    assert main(["audit", "checkpoint", "--store", postgres_url]) == 0
    capsys.readouterr()
    holder: Any = psycopg.connect(postgres_url)
    try:
        holder.execute(f"LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE")
        code = main([*verb, "--store", _short(postgres_url)])
    finally:
        holder.rollback()
        holder.close()
    out, err = capsys.readouterr()
    assert code == 2 and out == "", (code, out, err)
    assert err.count("\n") == 1, err
    assert "PostgreSQL store postgresql://" in err and " is busy: " in err, err
    assert "locked by another session" in err and "lock_timeout" in err, err
    assert "nothing was written" in err, err
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SELECT count(*) FROM agentgate_revocations").fetchone() == (0,)
