"""Review R68: a PostgreSQL URL that asks for TLS (``sslmode`` ``require``, ``verify-ca`` or
``verify-full``) for a host that is a unix socket. libpq uses no TLS over a socket and connects
without it, saying nothing: a store meant to be reached over TLS (a host name mistyped or left
out, ``PGHOST`` pointing at a local socket) was used in clear."""

from __future__ import annotations

import pytest

from agentgate.errors import StoreError
from agentgate.store._postgres import PostgresStore

pytestmark = pytest.mark.postgres


@pytest.mark.parametrize("mode", ["require", "verify-ca", "verify-full"])
def test_tls_asked_for_a_unix_socket_is_refused(postgres_url: str, mode: str) -> None:
    """Review R68: the store opened, in clear, on the socket of the session's real server (the
    fixture's URL names the socket directory as its host)."""
    with pytest.raises(StoreError) as refused:
        PostgresStore(f"{postgres_url}&sslmode={mode}")
    said = str(refused.value)
    assert f"asks for TLS (sslmode={mode} in the URL)" in said, said
    assert "is a unix socket" in said and "/sock" in said, said
    assert "Name the server's TCP host" in said, said


def test_tls_asked_by_pgsslmode_for_a_unix_socket_is_refused_naming_it(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R68: ``PGSSLMODE``, which libpq reads for a URL without ``sslmode``, alike."""
    monkeypatch.setenv("PGSSLMODE", "require")
    with pytest.raises(StoreError, match=r"asks for TLS \(sslmode=require from PGSSLMODE\)"):
        PostgresStore(postgres_url)


def test_the_default_socket_is_a_unix_socket_too() -> None:
    """Review R68: a URL without a host (libpq's default socket directory) is refused before any
    connection is tried."""
    with pytest.raises(StoreError, match="libpq's default socket directory"):
        PostgresStore("postgresql://agentgate@/agentgate?sslmode=require")


def test_a_socket_without_tls_asked_for_still_opens(postgres_url: str) -> None:
    """Review R68: ``prefer`` (libpq's default), ``allow`` and ``disable`` ask for no TLS; a host
    given by ``hostaddr`` is reached over TCP (not refused for its socket-like host)."""
    for mode in ("prefer", "allow", "disable"):
        PostgresStore(f"{postgres_url}&sslmode={mode}").close()
    with pytest.raises(StoreError) as tcp:  # no TCP listener: tried, and refused by the kernel
        PostgresStore(f"{postgres_url}&sslmode=require&hostaddr=127.0.0.1")
    assert str(tcp.value).startswith("cannot connect to PostgreSQL at "), str(tcp.value)
