"""Review R71 of r71-user-ops' change (33c92501): the refusal of a PostgreSQL database without a
store names its URL, and masks its password in every form the server was reached with.

A real PostgreSQL server (trusting local connections, so any password connects and must never
be printed), an empty database, the CLI's own ``main``.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentgate.cli.main import main

pytestmark = pytest.mark.postgres

_SECRET = "s3cret-pw"


@pytest.mark.parametrize(
    "form",
    [
        "{user}:{secret}@",  # in the user part
        "{user}:s3cret%40pw@",  # percent-encoded, an @ in it
        "{user}@|&password={secret}",  # a query parameter
        "{user}@|&pass%77ord={secret}",  # its name percent-encoded, as libpq reads it
        "{user}@|&sslpassword={secret}",  # the TLS key's
    ],
    ids=["userinfo", "percent-encoded", "query", "query-name-encoded", "sslpassword"],
)
def test_a_database_without_a_store_is_refused_its_password_masked_in_any_form(
    postgres_server: Any, capsys: pytest.CaptureFixture[str], form: str
) -> None:
    """Review R71: checked for each form libpq takes a password in (the user part, plain or
    percent-encoded, and a ``password``, ``pass%77ord`` or ``sslpassword`` parameter): the
    refusal names the database and never the password. (Held: pinned here.)"""
    empty = postgres_server.create_database()
    user, _, rest = empty.removeprefix("postgresql://").partition("@")
    userinfo, _, parameter = form.format(user=user, secret=_SECRET).partition("|")
    url = f"postgresql://{userinfo}{rest}{parameter}"
    database = rest.split("?")[0].lstrip("/")
    assert main(["approval", "list", "--store", url]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("agentgate: error: no store in the PostgreSQL database postgresql://"), line
    assert f"/{database}?" in line and "***" in line, line
    assert "s3cret" not in line, line
