"""Review R69: the network settings (keepalives, ``tcp_user_timeout``, ``connect_timeout``) that a
``pg_service.conf`` service sets are the ones a PostgreSQL store's connections use; agentgate's
own defaults (``NETWORK_DEFAULTS``, ``POOL_CONNECT_TIMEOUT_S``) fill in only what neither the
URL, nor the service, nor a ``PG*`` variable sets."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from agentgate.cli.main import main
from agentgate.errors import StoreError
from agentgate.store._postgres import PostgresStore

pytestmark = pytest.mark.postgres


def _service(postgres_url: str, path: Path, *settings: str) -> str:
    """A ``pg_service.conf`` at ``path`` whose service ``agentgate`` reaches the database of
    ``postgres_url`` with ``settings`` (``key=value`` lines) too; the URL that names it."""
    parts = urlsplit(postgres_url)
    query = parse_qs(parts.query)
    path.write_text(
        "[agentgate]\n"
        f"host={query['host'][0]}\nport={query['port'][0]}\n"
        f"dbname={parts.path.lstrip('/')}\nuser={parts.netloc.split('@')[0]}\n"
        + "".join(f"{s}\n" for s in settings)
    )
    return "postgresql:///?service=agentgate"


def _used(store: PostgresStore) -> dict[str, str]:
    """The libpq parameters a pooled connection of ``store`` was made with."""
    with store.pool.connection() as conn:
        return {o.keyword.decode(): (o.val or b"").decode() for o in conn.pgconn.info}


def test_a_services_network_settings_are_kept(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R69: a service's ``keepalives_idle``, ``tcp_user_timeout`` and ``connect_timeout``
    were replaced by agentgate's defaults (5 s, 10000 ms, 10 s) on every connection, libpq
    taking the parameters a connection is given over its service's (docs/operations.md said to
    set them in the URL instead). The service's are used now; agentgate's fill in the rest."""
    services = tmp_path / "pg_service.conf"
    url = _service(
        postgres_url, services, "keepalives_idle=60", "tcp_user_timeout=30000", "connect_timeout=3"
    )
    monkeypatch.setenv("PGSERVICEFILE", str(services))
    with PostgresStore(url) as store:
        used = _used(store)
        assert (used["keepalives_idle"], used["tcp_user_timeout"], used["connect_timeout"]) == (
            "60",
            "30000",
            "3",
        )
        assert (used["keepalives"], used["keepalives_interval"], used["keepalives_count"]) == ("1", "2", "3")
        # psycopg waits for a connection itself, reading connect_timeout from what it is given
        # (never from a service): the service's is given to it.
        assert store.pool.kwargs["connect_timeout"] == "3"


def test_the_url_wins_over_its_service_and_pgconnect_timeout_over_agentgates(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R69: with a service's settings now read, libpq's order still holds: the URL's value,
    else the service's, else the ``PG*`` variable's, else agentgate's default (until review R69
    agentgate's default came before the service's)."""
    services = tmp_path / "pg_service.conf"
    url = _service(postgres_url, services, "keepalives_idle=60")
    monkeypatch.setenv("PGSERVICEFILE", str(services))
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "4")
    with PostgresStore(f"{url}&keepalives_idle=30") as store:
        used = _used(store)
        assert (used["keepalives_idle"], used["connect_timeout"], used["tcp_user_timeout"]) == (
            "30",
            "4",
            "10000",
        )


def test_a_services_connect_timeout_that_is_no_number_is_refused_naming_it(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R69: a service's ``connect_timeout`` that is not a number is a ``StoreError`` that
    names it, as one in the URL or ``PGCONNECT_TIMEOUT`` is."""
    services = tmp_path / "pg_service.conf"
    url = _service(postgres_url, services, "connect_timeout=soon")
    monkeypatch.setenv("PGSERVICEFILE", str(services))
    with pytest.raises(
        StoreError, match=r"^the service agentgate's connect_timeout must be a number of seconds, got 'soon'"
    ):
        PostgresStore(url)


def test_a_read_only_store_whose_service_asks_for_a_read_write_session_opens(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R69: a service that asks for a read-write session (``target_session_attrs=read-write``,
    to find the primary of several hosts) made a store opened to read only fail (`cannot connect
    to PostgreSQL ...: session is read-only`), as the URL's and ``PGTARGETSESSIONATTRS`` did until
    review R67: only those two were looked at. The primary is asked for instead, the session
    read only."""
    services = tmp_path / "pg_service.conf"
    url = _service(postgres_url, services, "target_session_attrs=read-write")
    monkeypatch.setenv("PGSERVICEFILE", str(services))
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "log.key"))
    assert main(["store", "init", "--store", url]) == 0
    with PostgresStore(url, create=False, read_only=True) as store:
        assert store.query("SELECT current_setting('transaction_read_only')") == [("on",)]
