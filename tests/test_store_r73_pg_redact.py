"""Review R73: ``_redact`` (a PostgreSQL store's connection string as an error or log shows it)
still showed a password, or a piece of it, where the string was not what libpq reads: a URL
with white space before its scheme and an ``=`` in it, a URL missing a ``/`` of its ``//``, a
misspelt ``password`` key (``pasword=``, ``passwd=``, as a key=value pair or a URL parameter),
and a key=value password holding an unquoted space followed by ``x=y`` (libpq reads that as
another parameter, unknown to it). Each is refused by ``PostgresStore``, whose error names the
string: masked. No server is needed."""

from __future__ import annotations

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg.conninfo import conninfo_to_dict

from agentgate.errors import StoreError
from agentgate.store._postgres import PostgresStore, _redact

_MARK = "Zq"
"""Every secret below holds it: it may never be shown."""

_LEAKED_BEFORE = [
    " postgresql://u:Zq1@h/db?sslmode=require",
    "\tpostgres://u:Zq1@h/db?application_name=x",
    "\npostgresql://u:Zq1@h:5432/db?sslmode=disable",
    "postgresql:/u:Zq1@h/db?sslmode=require",
    "postgres//u:Zq1@h/db?sslmode=require",
    "host=h pasword=Zq1 dbname=d",
    "host=h passwd=Zq1",
    "host=h Passwort=Zq1 dbname=d",
    "host=h password=Zq1 Zq2=x dbname=d",
    "host=h password=Zq1 Zq2 = x dbname=d",
    "postgresql://u@h/db?pasword=Zq1",
    "postgresql://u@h/db?sslmode=require&passwd=Zq1&dbname=d",
    "postgresql://u@h/db?pwd=Zq1&application_name=x",
]


@pytest.mark.parametrize("written", _LEAKED_BEFORE)
def test_a_string_libpq_refuses_shows_no_piece_of_its_password(written: str) -> None:
    """Review R73: each of these was shown with its password, or a piece of it, in full."""
    shown = _redact(written)
    assert _MARK not in shown, (written, shown)


@pytest.mark.parametrize("written", _LEAKED_BEFORE)
def test_a_postgres_store_refusing_it_names_it_masked(written: str) -> None:
    """Review R73: ``PostgresStore`` refuses each (libpq cannot parse it), and its
    ``StoreError`` quoted the string through ``_redact``: password and all."""
    with pytest.raises(StoreError) as refused:
        PostgresStore(written, create=False).close()
    assert _MARK not in str(refused.value), str(refused.value)


def test_a_misspelt_parameter_is_named_its_value_masked() -> None:
    """Review R73: the name of a parameter libpq does not know stays (the operator must see
    the typo), its value is masked (it may be a misspelt ``password``)."""
    with pytest.raises(StoreError, match="libpq knows no parameter 'pasword'") as refused:
        PostgresStore("postgresql://u@/db?host=/nonexistent&pasword=Zq1", create=False).close()
    assert "pasword=***" in str(refused.value), str(refused.value)
    assert _redact("host=h pasword=Zq1") == "host=h pasword=***"


@pytest.mark.parametrize(
    ("written", "shown"),
    [
        (
            "postgresql://u:p%40Zq@h/db?password=Zq2&sslpassword=Zq3",
            "postgresql://u:***@h/db?password=***&sslpassword=***",
        ),
        ("host=h password='a host=Zq1' dbname=d", "host=h password=*** dbname=d"),
        (r"host=h password = 'Zq1\' host=Zq2' port=5", "host=h password = *** port=5"),
        (r"host=h password=Zq1\ host=Zq2 port=5", "host=h password=*** port=5"),
        ("host=h password='Zq1 & sslmode=Zq2' port=5", "host=h password=*** port=5"),
    ],
)
def test_quoted_and_escaped_passwords_are_masked_as_libpq_reads_them(written: str, shown: str) -> None:
    """Review R73: the cases named by the review (a quoted password holding what reads as
    another parameter, an ``&``, escapes, spaces around ``=``, percent-escapes in a URL): the
    password is masked whole, the rest shown as written."""
    assert _redact(written) == shown


_PLAIN = st.sampled_from(["host=h", "dbname=d", "port=5432", "application_name='a b'", "sslmode=disable"])
_SECRET_KEY = st.sampled_from(["password", "sslpassword", "pasword", "passwd", "Password"])
_SECRET_VALUE = st.text(alphabet=" '\\=Zq@?&#hx\t", max_size=8).map(lambda inner: f"{_MARK}{inner}{_MARK}")


@st.composite
def _secret_pair(draw: st.DrawFn) -> str:
    """A secret key and value, written as an operator might: unquoted whatever it holds, quoted
    without escaping what it holds, quoted and escaped, with or without white space around the
    ``=``."""
    key, value = draw(_SECRET_KEY), draw(_SECRET_VALUE)
    equals = draw(st.sampled_from(["=", " = ", "= ", " ="]))
    escaped = value.replace("\\", "\\\\").replace("'", "\\'")
    written = draw(
        st.sampled_from([value, f"'{value}'", f"'{escaped}'", f"'{escaped}", value.replace(" ", "\\ ")])
    )
    return f"{key}{equals}{written}"


@settings(max_examples=2000)
@given(before=st.lists(_PLAIN, max_size=2), secret=_secret_pair(), after=st.lists(_PLAIN, max_size=2))
def test_no_piece_of_a_secret_is_shown_however_it_is_written(
    before: list[str], secret: str, after: list[str]
) -> None:
    """Review R73: whether libpq parses the string or not, however the secret is written, no
    piece of it is shown; where libpq parses it, what it reads as a host or database is."""
    written = " ".join([*before, secret, *after])
    shown = _redact(written)
    assert _MARK not in shown, (written, shown)
    try:
        parsed = conninfo_to_dict(written)
    except psycopg.ProgrammingError:  # libpq refuses it: only the masking is checked
        return
    for key in ("host", "dbname", "port"):
        if key in parsed:
            assert f"{key}={parsed[key]}" in shown, (written, shown)
