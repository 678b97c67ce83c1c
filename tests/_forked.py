"""Worker processes for the tests that run several processes on one store, forked from one fork
server that has imported agentgate.

Each worker must start as a fresh interpreter would: holding no lock, connection, pool or thread
of the test's process. multiprocessing's fork server is such a process, started once per test
process (a pytest-xdist worker): it imports ``PRELOAD``, opens nothing, and forks each worker,
which then runs a script's text at once, where a fresh interpreter spent 0.7 to 0.85 CPU-s
importing agentgate first (test_multiproc_r64_properties.py started 72 of them in a run, about
55 CPU-s; review R80).

The preload list is one for every file: it belongs to the fork server, one per process, and
until review R80 two files each set their own at import, the last collected replacing the other.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

PRELOAD = [
    "agentgate.authority",
    "agentgate.capabilities",
    "agentgate.cli.main",
    "agentgate.dispatch.gateway",
    "agentgate.gate",
    "agentgate.keys",
    "agentgate.policy",
    "agentgate.store",
    "agentgate.store._postgres",
    "agentgate.store.audit",
    "agentgate.store.grants",
    "agentgate.store.ledger",
]

_FORKSERVER = multiprocessing.get_context("forkserver")
_FORKSERVER.set_forkserver_preload(PRELOAD)

PROCESSES_NOT_DURABILITY = {"AGENTGATE_SQLITE_SYNCHRONOUS": "NORMAL"}
"""The environment the multi-process tests give their workers: concurrency is under test, not
whether a commit survives a power cut (tests/test_audit_crash.py), so no fsync per commit."""


def _main(code: str, argv: list[str], out: str, err: str, env: dict[str, str], cwd: str) -> None:
    """In the forked worker: the environment and directory the test had when it started it (the
    fork server's are those of the first test that started one), its stdout and stderr to files
    (each file descriptor, so that a traceback or a C library's message lands there too), then
    ``code`` run as a script."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    for fd, path in ((1, out), (2, err)):
        sink = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(sink, fd)
        os.close(sink)
    sys.argv = ["worker", *argv]
    exec(compile(code, "worker", "exec"), {"__name__": "worker"})


class Worker:
    """``code`` (a script's text) run in a forked worker with ``argv`` as ``sys.argv[1:]``, in the
    test's current directory and environment with ``env`` over it, as ``subprocess`` would start
    it; its stdout and stderr kept beside ``work``'s other files. ``poll`` reads as
    ``subprocess.Popen``'s: a worker killed by a signal has its negative number."""

    def __init__(
        self, work: Path, code: str, argv: list[str], env: Mapping[str, str] = PROCESSES_NOT_DURABILITY
    ) -> None:
        stem = work / f"worker-{time.monotonic_ns()}"
        self.out, self.err = stem.with_suffix(".out"), stem.with_suffix(".err")
        self.process = _FORKSERVER.Process(
            target=_main, args=(code, argv, str(self.out), str(self.err), {**os.environ, **env}, os.getcwd())
        )
        self.process.start()

    def poll(self) -> int | None:
        return self.process.exitcode

    def wait(self, timeout: float = 120) -> int:
        self.process.join(timeout)
        code = self.process.exitcode
        assert code is not None, f"the worker still runs after {timeout} s: {self.stderr()[-2000:]}"
        return code

    def stdout(self) -> str:
        return self.out.read_text() if self.out.exists() else ""

    def stderr(self) -> str:
        return self.err.read_text() if self.err.exists() else ""

    def result(self) -> dict[str, Any]:
        """Wait for the worker, which must succeed; the JSON object its last line of output is."""
        code = self.wait()
        assert code == 0, f"worker exit {code}: {self.stderr()[-3000:]}"
        lines = self.stdout().strip().splitlines()
        assert lines, f"the worker printed nothing: {self.stderr()[-3000:]}"
        result: dict[str, Any] = json.loads(lines[-1])
        return result
