"""A PostgreSQL server whose ``idle_session_timeout`` is shorter than ``IDLE_CHECK_S``
(review R67)."""

from __future__ import annotations

import time

import pytest

from agentgate.store._postgres import IDLE_CHECK_S, PostgresStore

pytestmark = pytest.mark.postgres

TIMEOUT_MS = 2000
"""The server's ``idle_session_timeout`` here: shorter than ``IDLE_CHECK_S``."""


def test_decisions_spaced_past_a_short_idle_session_timeout_all_go_through(postgres_url: str) -> None:
    """Review R67: a pooled connection was tested before use only once idle for more than
    ``IDLE_CHECK_S`` (5 s). A server (or role, or database) whose ``idle_session_timeout`` is
    shorter ends a session idle that long first, so a process deciding every few seconds, more
    rarely than that timeout, failed every decision (`terminating connection due to idle-session
    timeout`), a healthy server and process refusing everything, where docs/operations.md says a
    server's ``idle_session_timeout`` costs no decision. A connection is now tested once idle for
    half the server's timeout, when that is shorter than ``IDLE_CHECK_S``, and replaced."""
    assert TIMEOUT_MS / 1000 < IDLE_CHECK_S
    url = postgres_url + f"&options=-c%20idle_session_timeout%3D{TIMEOUT_MS}"
    with PostgresStore(url, max_size=1) as store:
        for _ in range(3):
            time.sleep(TIMEOUT_MS / 1000 + 1)  # the server ends the session meanwhile
            assert store.query("SELECT 1") == [(1,)]
