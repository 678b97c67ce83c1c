"""A PostgreSQL store opened to read only keeps the session options libpq takes from
``PGOPTIONS`` (review R67)."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from agentgate.cli.main import main
from agentgate.store._postgres import PostgresStore

pytestmark = pytest.mark.postgres


def test_the_verbs_that_only_read_find_a_store_whose_schema_pgoptions_names(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R67: a store set up in its own schema, found through ``PGOPTIONS='-c
    search_path=...'`` (libpq's environment, as docs/operations.md uses it), was created and
    written by ``store init``, but every verb that opens the store to read only (``audit
    verify``, ``budget held``, ``approval list``, and ``audit checkpoint``, which reads first)
    said `no store in the PostgreSQL database`, exit 2: the read-only session's own ``options``
    (``-c default_transaction_read_only=on``) replaced ``PGOPTIONS``, where it kept a URL's
    ``options``. They now keep ``PGOPTIONS`` too, and the session is still read only."""
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA agentgate")
    monkeypatch.setenv("PGOPTIONS", "-c search_path=agentgate")
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "log.key"))
    assert main(["store", "init", "--store", postgres_url]) == 0
    capsys.readouterr()
    for verb in (["audit", "checkpoint"], ["audit", "verify"], ["budget", "held"], ["approval", "list"]):
        code = main([*verb, "--store", postgres_url])
        out, err = capsys.readouterr()
        assert code == 0 and err == "", (verb, code, out, err)
    with PostgresStore(postgres_url, create=False, read_only=True) as store:
        assert store.query("SELECT current_schema(), current_setting('transaction_read_only')") == [
            ("agentgate", "on")
        ]
    with psycopg.connect(postgres_url) as conn:
        held = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").fetchone()
    assert held == (0,)  # nothing was made where the search path did not point
