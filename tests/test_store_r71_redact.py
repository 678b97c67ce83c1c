"""Review R71: a store URL's password never reaches an error, whatever it holds (a ``?``, an
``@``, a ``/``) and however the URL is mistyped; the database and host libpq reads still do.
No server is needed: every URL names a host or socket that refuses at once."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg.conninfo import conninfo_to_dict

from agentgate.cli.main import main
from agentgate.errors import StoreError
from agentgate.store import open_store
from agentgate.store._postgres import _redact

_MARK = "Zq"
"""Every secret below is made of pieces that start with it: none may appear in a message."""

_URLS = [
    # libpq reads the user part up to its first "@": this password holds "?password=" (review R71:
    # shown as postgres:Zq1?password=***&port=..., its start whole and the database dropped)
    "postgresql://postgres:Zq1?password=Zq2@/agentgate?host=/nonexistent&port=7164",
    "postgresql://alice:Zq1?sslmode=Zq2@127.0.0.1:1/agentgate",
    "postgresql://alice:Zq1?x@127.0.0.1:1/agentgate?application_name=a@b",
    "postgresql://alice:Zq1#Zq2@127.0.0.1:1/agentgate",
    # an "@" in a parameter after the user part: the host and database were masked with it
    "postgresql://alice:Zq1@127.0.0.1:1/agentgate?application_name=a@b",
    "postgresql://alice:Zq1@127.0.0.1:1/agentgate?password=Zq2@Zq3&sslmode=disable",
    # as meant, where libpq misreads it: an "@" or a "/" in the password
    "postgresql://alice:Zq1@Zq2@127.0.0.1:1/agentgate",
    "postgresql://alice:Zq1@Zq2?Zq3@127.0.0.1:1/agentgate",
    "postgresql://alice:Zq1/Zq2@127.0.0.1:1/agentgate",
    "postgresql://alice:Zq1/Zq2?Zq3@127.0.0.1:1/agentgate",
    "postgresql://alice@127.0.0.1:1/agentgate?password=Zq1?password=Zq2&port=1",
    "postgresql://alice@127.0.0.1:1/agentgate?sslpassword=Zq1&sslmode=disable",
]


def _libpq_reads(url: str) -> dict[str, str]:
    """The database and the host libpq reads from ``url``, where it reads them as meant (none
    holds a piece of the password)."""
    try:
        parsed = conninfo_to_dict(url)
    except Exception:
        return {}
    return {k: str(v) for k, v in parsed.items() if k in ("dbname", "host") and _MARK not in str(v)}


@pytest.mark.parametrize("url", _URLS)
def test_no_piece_of_the_password_is_shown_and_what_libpq_connects_to_is(url: str) -> None:
    """Review R71: ``_redact`` ended the user part at the first ``?`` where libpq ends it at the
    first ``@``: a password holding ``?password=`` was shown from its start, and the database
    and host dropped; an ``@`` in a parameter value joined the user part to it, masking the host
    and database (what the operator needs to see)."""
    shown = _redact(url)
    assert _MARK not in shown, shown
    for name, value in _libpq_reads(url).items():
        assert value in shown, (name, shown)


@pytest.mark.parametrize("url", _URLS)
def test_open_store_never_quotes_the_password(url: str) -> None:
    """Review R71: every store error that names the URL (here, cannot connect, or not a valid
    URL, or a password libpq would misread) shows it through ``_redact``."""
    with pytest.raises(StoreError) as refused:
        open_store(url, create=False).close()
    assert _MARK not in str(refused.value), str(refused.value)


def test_the_reviewers_url_shows_its_database_and_socket() -> None:
    """Review R71: the refusal printed ``postgresql://postgres:abc?password=***&port=7164``."""
    url = "postgresql://postgres:abc?password=s3cret@/DB?host=/tmp/x&port=7164"
    assert _redact(url) == "postgresql://postgres:***@/DB?host=/tmp/x&port=7164"


_SECRET = st.text(alphabet="?@/#&:=%Zq", max_size=6).map(lambda inner: f"Zq{inner}Zq")
_FORMS = [
    "postgresql://{user}:{secret}@{host}{tail}",
    "postgresql://{user}@{host}/db?password={secret}&port=1",
    "postgresql://{host}/db?sslpassword={secret}",
]


@settings(max_examples=3000, deadline=None)
@given(
    secret=_SECRET,
    form=st.sampled_from(_FORMS),
    user=st.sampled_from(["u", "al?ice", "al#ice", "", "u?x=1"]),
    host=st.sampled_from(["h:1", "", "h"]),
    tail=st.sampled_from(["/db", "/db?host=/tmp/x&port=1", "/db?application_name=a@b", "?dbname=d", ""]),
)
def test_no_piece_of_any_password_is_shown(secret: str, form: str, user: str, host: str, tail: str) -> None:
    """Review R71: whatever a password holds (``?``, ``@``, ``/``, ``#``, ``&``, ``:``), in the
    user part or as a parameter, no piece of it is shown, as libpq reads the URL or as it was
    meant; and where libpq reads the URL as meant and a database or host holds none of it, that
    is shown."""
    url = form.format(user=user, secret=secret, host=host, tail=tail)
    shown = _redact(url)
    assert _MARK not in shown, (url, shown)
    if "@" not in secret and "/" not in secret:
        for name, value in _libpq_reads(url).items():
            assert value in shown, (url, shown, name)


_MISTYPED = [
    "postgresql//u:Zq1@h/db",
    "postgres//u:Zq1@h/db",
    "POSTGRESQL//u:Zq1@h/db",
    "postgresql;//u:Zq1@h/db",
    "postgresql.//u:Zq1@h/db",
    "postgresql+psycopg//u:Zq1@h/db",
    "sqlite//x.db",
    "postgresql/u:Zq1@h/db",
    "postgresql ://u:Zq1@h/db",
    "postgresql\\\\u:Zq1@h/db",
]


@pytest.mark.parametrize("url", _MISTYPED)
def test_a_store_scheme_without_its_colon_is_a_mistyped_url(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R71: ``postgresql//u:PW@h/db`` (the colon missing) was taken for a SQLite path:
    ``store init`` created ``postgresql/u:PW@h/db`` in the working directory, and a refusal
    read ``no store at postgresql//u:PW@h/db``, the password whole."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreError, match="lacks the :// after its scheme") as refused:
        open_store(url).close()
    assert _MARK not in str(refused.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "verb",
    [
        ["store", "init"],
        ["store", "prune", "--older-than", "1d"],
        ["approval", "list"],
        ["budget", "held"],
        ["audit", "verify"],
        ["tasks", "dead-letters"],
        ["grant", "revoke", "0" * 64],
    ],
)
@pytest.mark.parametrize(
    "url", ["postgresql//u:Zq1@h/db", "postgresql://alice:Zq1?password=Zq2@/db?host=/nonexistent"]
)
def test_every_verb_that_opens_a_store_refuses_it_unquoted(
    verb: list[str],
    url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Review R71: every verb that opens a store (``open_store`` or ``open_existing_store``)
    refuses a mistyped URL or one it cannot reach without the password, and creates nothing."""
    monkeypatch.chdir(tmp_path)
    assert main([*verb, "--store", url]) == 2
    err = capsys.readouterr().err
    assert "agentgate: error:" in err and _MARK not in err, err
    assert list(tmp_path.iterdir()) == []


def test_a_url_with_an_empty_host_is_not_a_mistyped_one() -> None:
    """``postgresql:///db`` is a valid URL (libpq's default socket): it is not refused as mistyped."""
    with pytest.raises(StoreError) as refused:
        open_store("postgresql:///db?host=/nonexistent", create=False).close()
    assert "lacks" not in str(refused.value) and "cannot connect" in str(refused.value)


def test_a_path_under_a_directory_named_like_a_scheme_is_still_a_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only a URL's shape is refused: ``postgresql/agentgate.db`` (a directory of that name, no
    user name and password) is a SQLite file, as before."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "postgresql").mkdir()
    open_store("postgresql/agentgate.db").close()
    assert (tmp_path / "postgresql" / "agentgate.db").is_file()
