"""Review R68: a PostgreSQL store opened to read only keeps the session ``options`` that a
``pg_service.conf`` service sets (libpq merges a service's settings in as it connects)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest

from agentgate.cli.main import main
from agentgate.store._postgres import PostgresStore

pytestmark = pytest.mark.postgres


def test_a_read_only_store_keeps_the_options_of_its_service(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R68: a store found through a service whose ``options`` set its schema
    (``-c search_path=agentgate``) was made by ``store init``, but opened to read only its
    session's own ``options`` (``-c default_transaction_read_only=on``) replaced the service's,
    as they replaced ``PGOPTIONS`` until review R67: the verbs that only read found `no store in
    the PostgreSQL database`. The service's options are kept now, and the session is read only."""
    parts = urlsplit(postgres_url)
    query = parse_qs(parts.query)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA agentgate")
    services = tmp_path / "pg_service.conf"
    services.write_text(
        "[agentgate]\n"
        f"host={query['host'][0]}\nport={query['port'][0]}\n"
        f"dbname={parts.path.lstrip('/')}\nuser={parts.netloc.split('@')[0]}\n"
        "options=-c search_path=agentgate\n"
    )
    monkeypatch.setenv("PGSERVICEFILE", str(services))
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "log.key"))
    url = "postgresql:///?service=agentgate"
    assert main(["store", "init", "--store", url]) == 0
    capsys.readouterr()
    for verb in (["audit", "checkpoint"], ["audit", "verify"], ["budget", "held"]):
        code = main([*verb, "--store", url])
        out, err = capsys.readouterr()
        assert code == 0 and err == "", (verb, code, out, err)
    with PostgresStore(url, create=False, read_only=True) as store:
        assert store.query("SELECT current_schema(), current_setting('transaction_read_only')") == [
            ("agentgate", "on")
        ]
