"""Review R72: ``_redact`` (a store's connection string as an error or log shows it) left pieces
of a password shown, or raised instead of masking, for inputs review R71's property did not make:
a host list or a bracketed IPv6 host before a ``?password=`` whose value holds an ``@``, a
percent-escape that is not UTF-8, and a libpq key=value connection string (``PostgresStore``
takes one; ``open_store`` refuses it). No server is needed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from agentgate.errors import StoreError
from agentgate.store import open_store
from agentgate.store._postgres import PostgresStore, _redact

_MARK = "Zq"
"""Every secret below is made of pieces that start with it: none may appear in what is shown."""

_HOSTS = ["h", "h:5432", "h1,h2", "h1:1,h2:2", "[::1]", "[::1]:5432", "[::1]:1,h:2", "10.0.0.1:5432,h"]


@pytest.mark.parametrize("host", _HOSTS)
@pytest.mark.parametrize("key", ["password", "sslpassword"])
def test_a_host_list_or_ipv6_host_before_a_secret_holding_an_at_sign(host: str, key: str) -> None:
    """Review R72: ``postgresql://h1:1,h2:2?password=Zq1@Zq2`` showed ``postgresql://h1:***@Zq2``
    and ``postgresql://[::1]:5432?password=Zq1@Zq2`` showed ``postgresql://[:***@Zq2``: libpq
    reads the hosts and the password's start as a user part and the rest of the password as
    the host, and only a single ``host:port`` was taken as the other reading, the one meant."""
    url = f"postgresql://{host}?{key}=Zq1@Zq2/db"
    shown = _redact(url)
    assert _MARK not in shown, (url, shown)


_USERS = ["", "u", "alice", "a.b-c", "u%40x", "u?x", "u#x"]
_PARAMS = [
    "application_name=a@b",
    "application_name=x",
    "host=/tmp/x",
    "port=1",
    "sslmode=disable",
    "dbname=d",
    "application_name=a?b",
    "application_name=u:p@h",
]
_SECRET = st.lists(st.sampled_from([*"?@/#:=,", "password=", "Zq", "@h/db", "?host=h"]), max_size=5).map(
    lambda pieces: _MARK + "".join(pieces) + _MARK
)


@settings(max_examples=1500)
@given(
    user=st.sampled_from(_USERS),
    secret=_SECRET,
    host=st.sampled_from(["", *_HOSTS, "db.example.com"]),
    path=st.sampled_from(["", "/", "/db"]),
    params=st.lists(st.sampled_from(_PARAMS), max_size=3),
    form=st.integers(0, 3),
    key=st.sampled_from(["password", "sslpassword", "pass%77ord"]),
)
def test_no_piece_of_a_password_is_shown_whatever_the_hosts(
    user: str, secret: str, host: str, path: str, params: list[str], form: int, key: str
) -> None:
    """Review R72: review R71's property over any host list (names, ports, bracketed IPv6
    addresses): a password in the user part or as a parameter, holding ``?``, ``@``, ``/``,
    ``#``, ``:``, ``=`` or ``,`` (an ``&`` that starts a parameter libpq knows ends it, as libpq
    reads it: not made here), is never shown, as libpq reads the URL or as it was meant."""
    query = "?" + "&".join(params) if params else ""
    joiner = "&" if query else "?"
    url = [
        f"postgresql://{user}:{secret}@{host}{path}{query}",
        f"postgresql://{user}@{host}{path}{query}{joiner}{key}={secret}",
        f"postgresql://{host}{path}{query}{joiner}{key}={secret}",
        f"postgresql://{host}?{key}={secret}",
    ][form]
    shown = _redact(url)
    assert _MARK not in shown, (url, shown)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:Zq1@h/%ff",
        "postgresql://u:Zq1@%aa/db",
        "postgresql://u:Zq%ff1@h/db",
        "postgresql://u@h/db?application_name=%c3&password=Zq1",
    ],
)
def test_a_percent_escape_that_is_not_utf8_is_a_store_error(url: str) -> None:
    """Review R72: psycopg decodes what libpq reads as UTF-8: ``_redact`` raised
    ``UnicodeDecodeError`` (so did every error that names the store), and ``open_store``
    raised it too, a ``ValueError`` that is no ``StoreError`` and named nothing. Now the URL is
    masked as one libpq does not read as meant, and the store refuses it, naming it masked."""
    assert _MARK not in _redact(url)
    with pytest.raises(StoreError, match="not UTF-8") as refused:
        open_store(url, create=False).close()
    assert _MARK not in str(refused.value), str(refused.value)


_CONNINFOS = [
    "host=h password=Zq1 dbname=d",
    "password=Zq1",
    "host=h password = Zq1 dbname=d",
    "host=h password='Zq1 Zq2' dbname=d",
    r"host=h password='Zq1\' Zq2' dbname=d",
    r"host=h password=Zq1\ Zq2 dbname=d",
    "host=h sslpassword=Zq1 password=Zq2",
    "host=h\tpassword=Zq1\ndbname=d",
    "host=h password='Zq1 dbname=d",
    "host=h password dbname=Zq1",
    "host=h PASSWORD=Zq1",
]


@pytest.mark.parametrize("conninfo", _CONNINFOS)
def test_a_key_value_connection_string_shows_no_password(conninfo: str) -> None:
    """Review R72: ``_redact`` read only URLs: a libpq key=value string
    (``host=h password=secret``) was shown whole, password and all, in every error that named
    the store. Its ``password`` and ``sslpassword`` values are masked as libpq reads them
    (quoted, escaped); from where it stops parsing, all of it is."""
    shown = _redact(conninfo)
    assert _MARK not in shown, shown
    assert shown.startswith("host=h") or shown.startswith("password="), shown


def test_a_key_value_connection_string_keeps_what_is_not_secret() -> None:
    """The host and database an operator needs to see stay."""
    assert _redact("host=db.example port=5433 password='a b' dbname=agentgate") == (
        "host=db.example port=5433 password=*** dbname=agentgate"
    )


_VALUE = st.text(alphabet=" '\\=Zq@?/&#", max_size=8).map(lambda inner: f"Zq{inner}Zq")


@settings(max_examples=1500)
@given(
    before=st.sampled_from([{}, {"host": "h"}, {"host": "/tmp/x", "port": "5"}]),
    after=st.sampled_from([{}, {"dbname": "d"}, {"application_name": "a b"}]),
    password=_VALUE,
    key=st.sampled_from(["password", "sslpassword"]),
)
def test_no_piece_of_a_key_value_password_is_shown(
    before: dict[str, str], after: dict[str, str], password: str, key: str
) -> None:
    """Review R72: whatever the password holds (spaces, quotes, backslashes, ``=``), as
    psycopg writes a connection string (``make_conninfo``), no piece of it is shown, and the
    other values are."""
    conninfo = make_conninfo("", **before, **{key: password}, **after)
    assert conninfo_to_dict(conninfo)[key] == password
    shown = _redact(conninfo)
    assert _MARK not in shown, (conninfo, shown)
    for value in (*before.values(), *after.values()):
        assert value in shown.replace("'", ""), (conninfo, shown)


@pytest.mark.parametrize("conninfo", _CONNINFOS)
def test_a_postgres_store_from_a_key_value_string_that_cannot_connect_names_it_masked(
    conninfo: str,
) -> None:
    """Review R72: ``PostgresStore("host=... password=secret ...")``, failing to connect (or
    to parse), quoted the string whole in its ``StoreError``."""
    unreachable = conninfo.replace("host=h", "host=/nonexistent port=1 connect_timeout=2")
    with pytest.raises(StoreError) as refused:
        PostgresStore(unreachable, create=False).close()
    assert _MARK not in str(refused.value), str(refused.value)


def test_a_non_numeric_connect_timeout_of_a_key_value_string_names_it_masked() -> None:
    """Review R72: the ``connect_timeout`` refusal quotes the store through ``_redact`` too."""
    with pytest.raises(StoreError, match="connect_timeout") as refused:
        PostgresStore("host=/nonexistent password=Zq1 connect_timeout=soon", create=False).close()
    assert _MARK not in str(refused.value), str(refused.value)
