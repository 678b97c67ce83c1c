"""A PostgreSQL store opened to read only through a URL that asks libpq for a read-write
session (``target_session_attrs=read-write``, an HA URL that must find the primary) (review
R67)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.cli.main import main
from agentgate.store._postgres import PostgresStore

pytestmark = pytest.mark.postgres


@pytest.mark.parametrize("where", ["url", "environment"])
def test_the_verbs_that_only_read_open_a_store_whose_url_asks_for_a_read_write_session(
    postgres_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    where: str,
) -> None:
    """Review R67: ``target_session_attrs=read-write`` (in the URL, or ``PGTARGETSESSIONATTRS``),
    the usual way a multi-host URL finds the primary, made every verb that opens the store to
    read only (``audit verify``, ``budget held``, ``approval list``, and ``audit checkpoint``,
    which reads first) fail with `cannot connect to PostgreSQL ...: session is read-only`, exit
    2: the session it asks for read only (``default_transaction_read_only``) is never the
    read-write one libpq was told to find. Such a session now asks libpq for the primary
    instead, and is still read only."""
    url = postgres_url
    if where == "url":
        url += "&target_session_attrs=read-write"
    else:
        monkeypatch.setenv("PGTARGETSESSIONATTRS", "read-write")
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "log.key"))
    assert main(["store", "init", "--store", url]) == 0
    capsys.readouterr()
    for verb in (["audit", "checkpoint"], ["audit", "verify"], ["budget", "held"], ["approval", "list"]):
        code = main([*verb, "--store", url])
        out, err = capsys.readouterr()
        assert code == 0 and err == "", (verb, code, out, err)
    with PostgresStore(url, create=False, read_only=True) as store:
        assert store.query("SELECT current_setting('transaction_read_only')") == [("on",)]
