"""A key=value connection string holding a NUL character, as ``_redact`` shows it.

libpq reads a connection string as C text: it ends at the first NUL, and psycopg's
``conninfo_to_dict`` (libpq's own reading, the judge ``_redact_conninfo`` asks) reads only the pairs
before it, where ``_conninfo_pairs`` reads the NUL as a part of a value. That is the one kind of
string libpq parses into other pairs than the ones written: ``_redact_conninfo`` then shows libpq's
reading, rebuilt by ``make_conninfo``, secrets masked (review R74: no test reached that branch
before). ``PostgresStore`` names the string so in its error. No server is needed.
"""

from __future__ import annotations

import pytest
from psycopg.conninfo import conninfo_to_dict

from agentgate.errors import StoreError
from agentgate.store._postgres import PostgresStore, _redact

_SHOWN_AS_LIBPQ_READS = [
    ("host=/nonexistent\x00password=Zq1", "host=/nonexistent"),
    ("host=/nonexistent password=Zq1\x00Zq2", "password=*** host=/nonexistent"),
    ("password=Zq1\x00 host=/nonexistent", "password=***"),
    ("host='/non existent' sslpassword=Zq1\x00Zq2", "host='/non existent' sslpassword=***"),
    ("host=/nonexistent\x00 Zq1", "host=/nonexistent"),
]


@pytest.mark.parametrize(("written", "shown"), _SHOWN_AS_LIBPQ_READS)
def test_a_string_with_a_nul_is_shown_as_libpq_reads_it(written: str, shown: str) -> None:
    """Review R74: the pairs after a NUL, which libpq never reads, are not shown, and a secret
    holding one is masked whole (the part after the NUL too); the string is libpq's reading,
    rebuilt, not the text as written."""
    assert _redact(written) == shown
    assert conninfo_to_dict(shown.replace("***", "x")).keys() == conninfo_to_dict(written).keys()


def test_a_postgres_store_names_a_string_with_a_nul_as_libpq_reads_it() -> None:
    """Review R74: ``PostgresStore``'s error names the string it could not connect with as
    libpq read it, its password masked and no piece of it shown."""
    with pytest.raises(StoreError) as refused:
        PostgresStore("host=/nonexistent password=Zq1\x00Zq2 connect_timeout=1", create=False).close()
    message = str(refused.value)
    assert "Zq" not in message, message
    assert "password=*** host=/nonexistent" in message, message
