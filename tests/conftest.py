"""Shared fixtures: a real SQLite file per test, and one real PostgreSQL server per session.

The PostgreSQL server is started by the test session itself (initdb and pg_ctl into a temporary
directory, listening on a unix socket only) and stopped afterwards. When running as root, the
server runs as the ``postgres`` user, since PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentgate.store import SQLiteStore, Store


def _pg_bin(name: str) -> str:
    found = shutil.which(name)
    if found:
        return found
    for candidate in sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True):
        return str(candidate)
    raise RuntimeError(f"{name} not found: install PostgreSQL (make test does it with apt-get)")


class PostgresServer:
    """A throwaway PostgreSQL cluster on a unix socket in a temporary directory."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="agentgate-pg-"))
        self.data = self.root / "data"
        self.socket_dir = self.root / "sock"
        self.socket_dir.mkdir()
        self.port = 5432 + (os.getpid() % 1000) + 1000
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
            shutil.chown(self.socket_dir, "postgres")
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.user = "postgres" if self.as_user else os.environ.get("USER", "postgres")

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.as_user, *args], check=check, capture_output=True, text=True)

    def init(self) -> None:
        self.run(_pg_bin("initdb"), "-D", str(self.data), "-U", self.user, "--auth=trust", "-E", "UTF8")
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(
                f"listen_addresses = ''\nunix_socket_directories = '{self.socket_dir}'\nport = {self.port}\n"
                "max_connections = 200\nfsync = on\n"
            )

    def start(self) -> None:
        self.run(_pg_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.root / "log"), "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self.run(_pg_bin("pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop", check=False)

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://{self.user}@/{dbname}?host={self.socket_dir}&port={self.port}"

    def create_database(self) -> str:
        name = "t_" + uuid.uuid4().hex[:12]
        self.run(
            _pg_bin("psql"),
            "-h",
            str(self.socket_dir),
            "-p",
            str(self.port),
            "-U",
            self.user,
            "-d",
            "postgres",
            "-c",
            f"CREATE DATABASE {name}",
        )
        return self.url(name)

    def destroy(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    server = PostgresServer()
    server.init()
    server.start()
    try:
        yield server
    finally:
        server.destroy()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """A fresh, empty database on the session's PostgreSQL server."""
    return postgres_server.create_database()


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "agentgate.db")
    yield store
    store.close()


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
