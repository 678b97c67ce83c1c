"""Review R73: a PostgreSQL store as a hostile or careless operator sets it up: a wrong password,
a server that is down, a database that does not exist, a role without the rights agentgate's
tables need. Each is a ``StoreError`` that says what is wrong and which store (its URL, the
password masked), never a traceback or the password. A role with no right on a table was
refused as ``PostgreSQL error: permission denied for table ...`` and one without CREATE as
``... is missing and this role may not create it``, neither naming the store. On real servers:
the suite's, and for a wrong password one of this module's own that asks for passwords."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from agentgate.authority import GrantRepository
from agentgate.errors import StoreError
from agentgate.store._pgserver import PostgresServer
from agentgate.store._postgres import PostgresStore

pytestmark = pytest.mark.postgres

_PASSWORD = "Zq1-right"


def _as_role(url: str, role: str, password: str) -> str:
    """``url`` (the suite's form: ``postgresql://USER@/DB?host=...``) as ``role``, with
    ``password`` (percent-encoded) in its user part."""
    encoded = password.replace("%", "%25").replace(" ", "%20").replace("'", "%27")
    return url.replace(f"://{conninfo_to_dict(url)['user']}@", f"://{role}:{encoded}@", 1)


@pytest.fixture(scope="module")
def password_server() -> Iterator[PostgresServer]:
    """A server that asks the role ``r73_pw`` for its password (scram-sha-256) on its socket."""
    server = PostgresServer(fsync=False)
    server.init()
    hba = server.data / "pg_hba.conf"
    hba.write_text("local all r73_pw scram-sha-256\n" + hba.read_text())
    server.start()
    try:
        with psycopg.connect(server.url(), autocommit=True) as admin:
            admin.execute(f"CREATE ROLE r73_pw LOGIN PASSWORD '{_PASSWORD}'")
        yield server
    finally:
        server.destroy()


@pytest.fixture
def limited_role(postgres_url: str) -> Iterator[str]:
    """A role that may connect to the test's database and do nothing else."""
    name = "r73_" + conninfo_to_dict(postgres_url)["dbname"]
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {name} LOGIN PASSWORD 'Zq2-limited'")
    yield name
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f"DROP OWNED BY {name}")
        admin.execute(f"DROP ROLE {name}")


def _refusal(url: str, **kwargs: object) -> str:
    with pytest.raises(StoreError) as refused:
        PostgresStore(url, **kwargs).close()  # type: ignore[arg-type]
    return str(refused.value)


def _names_the_store_masked(said: str, dbname: str) -> None:
    assert dbname in said, said
    assert "Zq" not in said, said


@pytest.mark.parametrize("password", ["Zq9-wrong", "Zq9 it's wrong"])
def test_a_wrong_password_is_a_store_error_naming_the_store_masked(
    password_server: PostgresServer, password: str
) -> None:
    """Review R73: a wrong password (in a URL, or a key=value string, whatever it holds) is
    refused at once, libpq's reason given, the store named, the password not shown."""
    url = password_server.create_database()
    dbname = conninfo_to_dict(url)["dbname"]
    as_url = _as_role(url, "r73_pw", password)
    keyvalue = psycopg.conninfo.make_conninfo(
        "", **{**conninfo_to_dict(url), "user": "r73_pw", "password": password}
    )
    for written in (as_url, keyvalue):
        said = _refusal(written)
        assert "password authentication failed" in said, said
        _names_the_store_masked(said, dbname)
    store = PostgresStore(_as_role(url, "r73_pw", _PASSWORD))  # the right one opens it
    try:
        assert [tuple(row) for row in store.query("SELECT current_user")] == [("r73_pw",)]
    finally:
        store.close()


def test_a_database_that_does_not_exist_is_named(postgres_url: str) -> None:
    """Review R73: a mistyped database name is refused, saying that it does not exist."""
    dbname = conninfo_to_dict(postgres_url)["dbname"]
    missing = _as_role(postgres_url, conninfo_to_dict(postgres_url)["user"], "Zq3")
    said = _refusal(missing.replace(f"/{dbname}", f"/{dbname}_nope"), create=False)
    assert f'database "{dbname}_nope" does not exist' in said, said
    _names_the_store_masked(said, f"{dbname}_nope")


def test_a_server_that_is_down_is_named(password_server: PostgresServer) -> None:
    """Review R73: nothing listening where the URL points (a stopped server's socket
    directory): refused at once, the store named, the password not shown."""
    url = password_server.url("gone").replace(f"port={password_server.port}", "port=1")
    said = _refusal(_as_role(url, "u", "Zq4"), timeout_s=2)
    assert "cannot connect to PostgreSQL" in said, said
    _names_the_store_masked(said, "gone")


def test_a_role_without_create_names_the_store(postgres_url: str, limited_role: str) -> None:
    """Review R73: a role that may not create agentgate's tables in an empty database is told
    so with the store named (before: the table alone, no store)."""
    url = _as_role(postgres_url, limited_role, "Zq2-limited")
    store = PostgresStore(url)
    try:
        with pytest.raises(StoreError, match="may not create it") as refused:
            GrantRepository(store)
    finally:
        store.close()
    _names_the_store_masked(str(refused.value), conninfo_to_dict(postgres_url)["dbname"])


def test_a_role_without_rights_on_the_tables_names_the_store_and_the_grants(
    postgres_url: str, limited_role: str
) -> None:
    """Review R73: a role that was never granted its rights on agentgate's tables (the owner
    made them; ``GRANT ... ON ALL TABLES`` forgotten, or run before an upgrade added one) was
    refused as ``PostgreSQL error: permission denied for table agentgate_revocations``: the
    store is named, and what to grant."""
    GrantRepository(owner := PostgresStore(postgres_url))
    owner.close()
    url = _as_role(postgres_url, limited_role, "Zq2-limited")
    store = PostgresStore(url)
    try:
        with pytest.raises(StoreError, match="permission denied for table agentgate_revocations") as refused:
            GrantRepository(store).revoke("ab" * 32, now=1)
    finally:
        store.close()
    said = str(refused.value)
    _names_the_store_masked(said, conninfo_to_dict(postgres_url)["dbname"])
    assert "PostgreSQL set-up" in said, said
