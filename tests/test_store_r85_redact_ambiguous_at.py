"""Review R85: ``_redact`` (a store's URL as an error or log shows it) showed the rest of a
password holding an ``@`` and a ``?`` where libpq reads the URL without error: libpq ends the
user part at its first ``@``, and what followed was read as a query whose ``@`` is a part of a
value, a socket directory (``?host=h,/ss@``) or a password parameter (``u:p@ss?password=x@h``,
the host ``ss`` shown). Such an ``@`` may end the user part as meant: the URL is now masked from
its first ``:`` to its last ``@``. An application name keeps its ``@`` (``worker@host``, review
R71), masked up to it. No server is needed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentgate.store._postgres import _redact

_MARK = "Zq"
"""Every secret below is made of pieces that start with it: none may appear in what is shown."""


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        # the reviewer's: libpq reads the password Zq and the hosts h and /Zq@
        ("postgresql://:Zq@?host=h,/Zq@", "postgresql://:***@"),
        ("postgresql://u:Zq@?host=/Zq@", "postgresql://u:***@"),
        ("postgresql://u%40x:Zq@?host=h,/Zq@h:5432/db", "postgresql://u%40x:***@h:5432/db"),
        ("postgresql://u:Zq@h/db?host=h,/Zq@h2/db", "postgresql://u:***@h2/db"),
        # the rest of the password read as the host, before a password parameter holding the @
        ("postgresql://u?x:Zq@Zq?password=Zq@h1,h2", "postgresql://u?x:***"),
        ("postgresql://u:Zq@h/dbZq?password=Zq@/tmp/", "postgresql://u:***"),
        # read as a database or a user name
        ("postgresql://u:Zq@?dbname=/Zq@h", "postgresql://u:***@h"),
        ("postgresql://u:Zq@?user=Zq@h", "postgresql://u:***@h"),
        # an application name keeps its @, masked up to it
        ("postgresql://u:Zq@?application_name=,/Zq@", "postgresql://u:***@?application_name=***@"),
    ],
)
def test_an_at_sign_in_the_query_that_may_end_the_user_part_shows_no_piece_of_the_password(
    url: str, shown: str
) -> None:
    """Each of these was shown with a piece of the password (``Zq``) in clear."""
    assert _redact(url) == shown
    assert _MARK not in shown


def test_a_password_holding_a_slash_before_the_query_hides_its_numeric_start() -> None:
    """``u:5432?host=h,/x@h/db`` is read by libpq as the host ``u`` with the port 5432 and the
    hosts ``h`` and ``/x@h/db``: the password ``5432?host=h,/x`` was shown whole."""
    assert _redact("postgresql://u:5432?host=h,/x@h/db") == "postgresql://u:***@h/db"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        # review R71: a password parameter holding an @, then what reads as no URL's hosts
        (
            "postgresql://alice:Zq1@127.0.0.1:1/agentgate?password=Zq2@Zq3&sslmode=disable",
            "postgresql://alice:***@127.0.0.1:1/agentgate?password=***&sslmode=disable",
        ),
        # review R71: an application name holding an @ keeps the host and database shown
        (
            "postgresql://alice:Zq1@127.0.0.1:1/agentgate?application_name=a@b",
            "postgresql://alice:***@127.0.0.1:1/agentgate?application_name=***@b",
        ),
        # an @ written %40 ends no user part
        (
            "postgresql://u:Zq@h/db?host=/tmp/a%40b&application_name=x",
            "postgresql://u:***@h/db?host=/tmp/a%40b&application_name=x",
        ),
        # without a : there is no password to hide
        (
            "postgresql://h/db?application_name=worker@host",
            "postgresql://h/db?application_name=worker@host",
        ),
    ],
)
def test_what_is_plainly_meant_stays_shown(url: str, shown: str) -> None:
    """The host and database an operator needs to see stay where no reading of the URL takes
    them for a part of the password."""
    assert _redact(url) == shown


_PIECES = [*"?@/#:=,", "Zq", "@h/db", "?host=h", "?dbname=", "?user=", ",/", "%40", "?password=", "[::1]"]


@settings(max_examples=300, deadline=None)
@given(
    user=st.sampled_from(["", "u", "u%40x", "u?x", "u#x"]),
    pieces=st.lists(st.sampled_from(_PIECES), max_size=5),
    host=st.sampled_from(["", "h", "h:5432", "h1,h2", "[::1]:5432", "%2Ftmp"]),
    path=st.sampled_from(["", "/", "/db"]),
    query=st.sampled_from(["", "?host=/tmp/x", "?port=1", "?dbname=d&application_name=a@b"]),
)
def test_no_piece_of_a_password_holding_query_parameters_is_shown(
    user: str, pieces: list[str], host: str, path: str, query: str
) -> None:
    """A password in the user part holding what reads as query parameters and ``@`` signs
    (not an application name: one holding an ``@`` keeps the host and database shown, review
    R71) shows no piece of it."""
    url = f"postgresql://{user}:{_MARK}{''.join(pieces)}{_MARK}@{host}{path}{query}"
    shown = _redact(url)
    assert _MARK not in shown, (url, shown)
