"""A throwaway PostgreSQL cluster on a unix socket, for the test suite and the benchmarks.

Not part of the API: it exists so that tests and benchmarks start a *real* server the same way
(initdb and pg_ctl into a temporary directory, no TCP listener). PostgreSQL refuses to run as
root, so under root the server runs as the ``postgres`` user.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import psycopg


def pg_binary(name: str) -> str | None:
    """``initdb``, ``pg_ctl`` or ``psql`` from PATH, else from Debian's versioned directory."""
    found = shutil.which(name)
    if found:
        return found
    candidates = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"), reverse=True)
    return str(candidates[0]) if candidates else None


def _require(name: str) -> str:
    found = pg_binary(name)
    if found is None:
        raise RuntimeError(f"{name} not found: install PostgreSQL (make test does it with apt-get)")
    return found


class PostgresServer:
    """A throwaway PostgreSQL cluster in a temporary directory, reachable on a unix socket only."""

    def __init__(self, port: int | None = None, *, fsync: bool = True) -> None:
        """``fsync=False`` (the test suite's server): commits still reach the operating system
        before they return (``synchronous_commit`` stays on), so a server killed or stopped
        ``immediate`` loses nothing it acknowledged; only a crash of the machine could. The
        benchmarks keep ``fsync`` on: they measure what a deployment pays."""
        self.fsync = fsync
        self.root = Path(tempfile.mkdtemp(prefix="agentgate-pg-"))
        self.data = self.root / "data"
        self.socket_dir = self.root / "sock"
        self.socket_dir.mkdir()
        self.port = port if port is not None else 6432 + os.getpid() % 1000
        self.as_user: list[str] = []
        if os.geteuid() == 0:
            shutil.chown(self.root, "postgres")
            shutil.chown(self.socket_dir, "postgres")
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.user = "postgres" if self.as_user else os.environ.get("USER", "postgres")
        self.made: list[str] = []
        """The databases ``create_database`` made and ``drop_made`` has not dropped, oldest first."""

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.as_user, *args], check=check, capture_output=True, text=True)

    def init(self) -> None:
        self.run(_require("initdb"), "-D", str(self.data), "-U", self.user, "--auth=trust", "-E", "UTF8")
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(
                f"listen_addresses = ''\nunix_socket_directories = '{self.socket_dir}'\nport = {self.port}\n"
                f"max_connections = 200\nfsync = {'on' if self.fsync else 'off'}\n"
            )

    def start(self) -> None:
        self.run(_require("pg_ctl"), "-D", str(self.data), "-l", str(self.root / "log"), "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        pg_ctl = pg_binary("pg_ctl")
        if pg_ctl is not None:
            self.run(pg_ctl, "-D", str(self.data), "-m", mode, "-w", "stop", check=False)

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://{self.user}@/{dbname}?host={self.socket_dir}&port={self.port}"

    def create_database(self) -> str:
        """A fresh, empty database; returns its URL. Copied from the template as files
        (``FILE_COPY``: faster than the default WAL-logged copy for a small template)."""
        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name} STRATEGY = FILE_COPY")
        self.made.append(name)
        return self.url(name)

    def drop_made(self, since: int = 0) -> None:
        """Drop the databases ``create_database`` made after the first ``since`` of ``made``,
        their sessions ended (``FORCE``); a server already stopped has nothing to drop."""
        names, self.made[since:] = self.made[since:], []
        with (
            contextlib.suppress(psycopg.OperationalError),
            psycopg.connect(self.url(), autocommit=True) as conn,
        ):
            for name in names:
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def destroy(self) -> None:
        self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)
