"""Shared fixtures: a real SQLite file per test, and one real PostgreSQL server per session.

The PostgreSQL server is started by the test session itself (``agentgate.store._pgserver``:
initdb and pg_ctl into a temporary directory, listening on a unix socket only) and stopped
afterwards. Both, and every test's ``tmp_path``, live in memory where the machine has room
(``_files_in_memory``).
"""

from __future__ import annotations

import gc
import os
import signal
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from agentgate.store import SQLiteStore, Store
from agentgate.store._pgserver import PostgresServer

# No per-example deadline in any property test: Hypothesis's default (200 ms) is a timing
# assertion, which this suite does not make (tests assert behaviour); on a loaded 2-core machine
# an example of test_audit_entry's encoding property once ran past it (review R66) and would
# have failed the run. Tests that set their own settings keep them.
settings.register_profile("agentgate", deadline=None)
settings.load_profile("agentgate")

# The suite's files go to a tmpfs when the machine has one with room, unless TMPDIR names a place:
# on this project's machines a SQLite commit's fsync costs 1.4 ms on the disk and 0.08 ms there,
# and CREATE DATABASE 83 ms against 34 ms (each test's databases are dropped after it:
# ``_databases_dropped``). No test observes
# the disk: whether a commit survives a power cut is beyond what a test can cause. Set here, at
# the suite's start, so that pytest's tmp_path, the PostgreSQL servers and every subprocess
# (which inherit the environment, xdist's workers too) use it.
_MEMORY = Path("/dev/shm")
_ROOM_NEEDED = 4 << 30


def _files_in_memory() -> None:
    if "TMPDIR" in os.environ or not os.access(_MEMORY, os.W_OK | os.X_OK):
        return
    room = os.statvfs(_MEMORY)
    if room.f_bavail * room.f_frsize >= _ROOM_NEEDED:
        os.environ["TMPDIR"] = str(_MEMORY)
        tempfile.tempdir = None  # read TMPDIR again


_files_in_memory()


def pytest_collection_finish(session: pytest.Session) -> None:
    """The objects the collection made (every test module, ~16,000 items: about a million objects
    in each xdist worker) are moved out of the garbage collector's sight (``gc.freeze``), its
    garbage collected first. They live until the worker ends, yet each full collection walked
    all of them: 0.5-1.2 s each, ~90 in the 29 files that call ``gc.collect()`` (to see a
    finalizer run or a leak go), 40-68 s of their run, 3-4 s once frozen. What a test makes is
    collected as before."""
    gc.collect()
    gc.freeze()


@pytest.fixture
def no_default_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory of its own (``tmp_path``), with no AGENTGATE_STORE: a verb given no
    --store finds no default store, ``.agentgate/agentgate.db`` of the working directory (since
    review R92 ``approval sign`` checks against it), whatever the checkout or the shell holds."""
    monkeypatch.delenv("AGENTGATE_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def default_sigint() -> Iterator[None]:
    """Ctrl-C raises ``KeyboardInterrupt`` in the main thread, as in a program run by hand (the
    tests that press it: a worker's handler may be another)."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("needs the main thread (signals)")
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


_SESSION_SERVER: list[PostgresServer] = []  # the session's PostgreSQL server, once started


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    # fsync off: the tests kill and restart servers as processes, never the machine, and a
    # commit still reaches the operating system before it returns (PostgresServer).
    server = PostgresServer(fsync=False)
    server.init()
    server.start()
    _SESSION_SERVER.append(server)
    try:
        yield server
    finally:
        _SESSION_SERVER.clear()
        server.destroy()


@pytest.fixture(autouse=True)
def _databases_dropped() -> Iterator[None]:
    """Every database a test made on the session's PostgreSQL server (``postgres_url``, the
    ``store`` fixture's, or ``postgres_server.create_database()`` itself) is dropped after it,
    its fixtures closed: a worker makes hundreds, 7.5 MB each, and a cluster of ~400 took 25-45 s
    to remove at the run's end."""
    before = len(_SESSION_SERVER[0].made) if _SESSION_SERVER else 0
    yield
    for server in _SESSION_SERVER:  # started by this test, or before it
        server.drop_made(before)


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """A fresh, empty database on the session's PostgreSQL server (dropped after the test)."""
    return postgres_server.create_database()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "agentgate.db")
    yield store
    store.close()


@pytest.fixture
def postgres_store(postgres_url: str) -> Iterator[Store]:
    """A store on a fresh PostgreSQL database, for a test of PostgreSQL alone (mark it
    ``postgres``): not the ``store`` fixture and a skip of its SQLite case."""
    from agentgate.store._postgres import PostgresStore

    opened = PostgresStore(postgres_url)
    yield opened
    opened.close()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """The same test against both stores."""
    if request.param == "sqlite":
        opened: Store = SQLiteStore(tmp_path / "agentgate.db")
    else:
        from agentgate.store._postgres import PostgresStore

        opened = PostgresStore(request.getfixturevalue("postgres_url"))
    yield opened
    opened.close()
