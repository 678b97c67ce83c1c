"""docs/operations.md followed literally by an operator, on a real
PostgreSQL 15 server (one per module, ``agentgate.store._pgserver``): store URLs, the
least-privilege set-up, backup and restore, and the errors the operator sees."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from agentgate.cli.main import main
from agentgate.errors import StoreError
from agentgate.store import open_store
from agentgate.store._postgres import PostgresStore
from agentgate.store.approvals import ApprovalStore

OPERATIONS = Path(__file__).resolve().parents[1] / "docs" / "operations.md"

# --- store URLs: a / in the user name or password ------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        # libpq finds no "@" before the first "/", so it reads "alice:hunter" as host and port,
        # and said: invalid integer value "hunter" for connection option "port".
        "postgresql://alice:hunter/2@/agentgate?host=/nonexistent",
        # the user name holds the "/": the URL was quoted whole, password and all.
        "postgresql://ali/ce:hunter2@/agentgate?host=/nonexistent&port=1",
        "postgresql://alice:hunter/2@127.0.0.1:1/agentgate",
    ],
)
def test_a_slash_in_the_user_name_or_password_is_refused_and_no_part_of_the_password_is_quoted(
    url: str,
) -> None:
    """docs/operations.md: a URL whose password libpq would misread is refused at once, the
    password never quoted. A ``/`` not written ``%2F`` made libpq take the user part for the
    host and port (``failed to resolve host 'alice'``) and quote the password in its error."""
    with pytest.raises(StoreError, match="%2F") as raised:
        open_store(url)
    assert "hunter" not in str(raised.value)


def test_a_slash_written_percent_encoded_is_read_as_part_of_the_password() -> None:
    with pytest.raises(StoreError, match="cannot connect") as raised:
        open_store("postgresql://alice:hunter%2F2@127.0.0.1:1/agentgate")
    assert "hunter" not in str(raised.value)


@pytest.mark.parametrize(
    "query",
    [
        "sslpassword=hunter2&sslmode=disable",  # the passphrase of the client's TLS key
        "pass%77ord=hunter2",  # libpq percent-decodes a parameter's name: this is password=
        "PASSWORD=hunter2&bogus=1",  # not a valid URL: refused before any connection
    ],
)
def test_a_secret_given_as_a_url_parameter_is_never_quoted(
    query: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only a parameter written ``password=`` was masked: ``sslpassword=`` and ``pass%77ord=``
    (which libpq reads as ``password=``) were quoted in "cannot connect to PostgreSQL at URL"
    (review r53)."""
    url = f"postgresql://alice@127.0.0.1:1/agentgate?{query}"
    with pytest.raises(StoreError) as raised:
        open_store(url)
    assert "hunter2" not in str(raised.value) and "=***" in str(raised.value)
    assert main(["approval", "list", "--store", url]) == 2
    assert "hunter2" not in capsys.readouterr().err


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        # libpq reads the user name al#ice (al?ice) and the password hunter2
        ("postgresql://al#ice:hunter2@127.0.0.1:1/agentgate", "al#ice:***@"),
        ("postgresql://al?ice:hunter2@127.0.0.1:1/agentgate", "al?ice:***@"),
        # and a password holding an @ after it: libpq read the host ter2@127.0.0.1, and quoted it
        ("postgresql://al#ice:hun@ter2@127.0.0.1:1/agentgate", "al#ice:***@"),
        # libpq reads the password hun#ter2: a # is no fragment to it
        ("postgresql://alice@127.0.0.1:1/agentgate?password=hun#ter2", "?password=***:"),
        # not valid (an & that starts no parameter): refused before any connection
        ("postgresql://alice@127.0.0.1:1/agentgate?password=hun&ter2", "?password=***"),
        (
            "postgresql://alice@127.0.0.1:1/agentgate?password=hun&ter2=x&sslmode=disable",
            "?password=***&sslmode",
        ),
    ],
)
def test_a_password_holding_a_hash_or_an_ampersand_or_after_such_a_user_name_is_never_quoted(
    url: str, masked: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R56: a password after a user name holding a ? or a # was quoted whole (or, holding
    an @, from it on as libpq's host name), and one given as password= was quoted from its first
    # or & on (``password=***#ter2``)."""
    with pytest.raises(StoreError) as raised:
        open_store(url)
    assert "ter2" not in str(raised.value) and masked in str(raised.value)
    assert main(["approval", "list", "--store", url]) == 2
    assert "ter2" not in capsys.readouterr().err


# --- store URLs: a postgresql:// URL is never a file name ----------------------------------------


def test_a_postgresql_url_with_a_leading_space_is_never_taken_as_a_file_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/operations.md: a ``scheme://...`` store is never taken as a file name, so that a
    revocation can never go to a local file instead of the store named. A value pasted with a
    leading space (an env file, a YAML value) became a SQLite file under
    `` postgresql:/alice:hunter2@db.example:5432/``: ``agentgate grant revoke`` said "revoked",
    exit 0, and the PostgreSQL store never had the revocation."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreError, match="white space") as refused:
        open_store(" postgresql://alice:hunter2@db.example:5432/agentgate").close()
    assert "hunter2" not in str(refused.value)
    assert list(tmp_path.iterdir()) == []


# --- the least-privilege set-up, as printed ------------------------------------------------------


def test_the_set_up_creates_the_application_role_its_grants_name() -> None:
    """docs/operations.md granted ``agentgate_app`` its rights without ever creating it: run as
    printed, the first GRANT failed (``role "agentgate_app" does not exist``)."""
    page = OPERATIONS.read_text()
    grants = page.index("```sql", page.index("grant the application role"))
    named = set(re.findall(r"\bTO (\w+);", page[grants : page.index("```", grants + 6)]))
    assert named == {"agentgate_app"}
    assert "createuser agentgate_app" in page[page.index("## PostgreSQL set-up") : grants]


# --- an upgrade whose store init was skipped: the missing table is named -------------------------


@pytest.mark.postgres
def test_the_application_role_is_told_which_table_of_a_do_block_is_missing(postgres_server: Any) -> None:
    """docs/operations.md, Upgrading: skipping ``store init`` fails closed with a ``StoreError``
    that names the missing table. Parts whose DDL is a ``DO`` block (approvals, the ledger, the
    audit log) said only "a part of the approvals tables is missing", not that it was
    ``approval_asked``, the table this version adds."""
    url = postgres_server.create_database()
    role = "r36o_" + uuid.uuid4().hex[:8]
    assert main(["store", "init", "--store", url]) == 0
    with PostgresStore(url) as owner, owner.transaction() as tx:
        tx.execute("DROP TABLE approval_asked")  # the store as an earlier version left it
        tx.execute(f"CREATE ROLE {role} LOGIN")
        tx.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")
        tx.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}")
    with (
        PostgresStore(url.replace(f"postgresql://{postgres_server.user}@", f"postgresql://{role}@")) as app,
        pytest.raises(StoreError, match=r"^approval_asked \(approvals\) is missing .*agentgate store init"),
    ):
        ApprovalStore(app)
