"""Where the suite's time goes: a pytest plugin that records each test's CPU, and a summary of
what it recorded (tests/README.md, "How long it takes, and where the time goes").

Record (each worker appends JSON lines to ``$AGENTGATE_CPU_DIR/<pid>.jsonl``)::

    mkdir -p /tmp/cpu && AGENTGATE_CPU_DIR=/tmp/cpu PYTHONPATH=tests PYTHONDONTWRITEBYTECODE= \\
        .venv/bin/pytest -q -n 3 -p _cpu_profile

then summarize: ``.venv/bin/python tests/_cpu_profile.py /tmp/cpu``.

Per test, over setup, call and teardown: the worker's own CPU (``RUSAGE_SELF``, its threads
included), the CPU of the subprocesses it waited for (``RUSAGE_CHILDREN``), the wall time, and
the TLS contexts it built in its own process (``ssl.create_default_context``, which loads the CA
bundle: every ``httpx.Client()``, module-level ``httpx.get`` and SDK client builds one) with their
CPU. What runs outside tests (the PostgreSQL servers, collection, pytest itself) is not counted,
nor are the workers ``_forked.Worker`` starts: they are the fork server's children, not the
test's (measure their files by the machine's busy time, ``/proc/stat``, instead).
Not loaded by the suite; a measuring tool, not a test (no ``test_`` prefix: never collected).
"""

from __future__ import annotations

import collections
import json
import os
import resource
import ssl
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_TLS = [0, 0.0]  # contexts built in this process, their CPU seconds
_default_context = ssl.create_default_context


def _counted_context(*args: Any, **kwargs: Any) -> ssl.SSLContext:
    started = time.process_time()
    try:
        return _default_context(*args, **kwargs)
    finally:
        _TLS[0] += 1
        _TLS[1] += time.process_time() - started


def _now() -> tuple[float, float, float, int, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    waited = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (
        own.ru_utime + own.ru_stime,
        waited.ru_utime + waited.ru_stime,
        time.perf_counter(),
        _TLS[0],
        _TLS[1],
    )


def pytest_configure(config: pytest.Config) -> None:
    if "AGENTGATE_CPU_DIR" not in os.environ:
        raise pytest.UsageError("-p _cpu_profile needs AGENTGATE_CPU_DIR (a directory to write to)")
    ssl.create_default_context = _counted_context  # type: ignore[assignment]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    before = _now()
    yield
    after = _now()
    row = {
        "id": item.nodeid,
        "self": after[0] - before[0],
        "child": after[1] - before[1],
        "wall": after[2] - before[2],
        "tls": after[3] - before[3],
        "tls_cpu": after[4] - before[4],
    }
    with open(Path(os.environ["AGENTGATE_CPU_DIR"]) / f"{os.getpid()}.jsonl", "a") as out:
        out.write(json.dumps(row) + "\n")


def summarize(directory: Path, top: int = 20) -> None:
    rows = [json.loads(line) for path in directory.glob("*.jsonl") for line in path.open()]
    if not rows:
        raise SystemExit(f"no records in {directory}")
    cpu = sorted((r["self"] + r["child"] for r in rows), reverse=True)
    total = sum(cpu)
    print(f"{len(rows)} tests: {sum(r['self'] for r in rows):.0f} CPU-s in the workers, ", end="")
    print(
        f"{sum(r['child'] for r in rows):.0f} in subprocesses, {sum(r['wall'] for r in rows):.0f} s of wall time"
    )
    print(f"TLS contexts: {sum(r['tls'] for r in rows)}, {sum(r['tls_cpu'] for r in rows):.0f} CPU-s")
    for share in (0.5, 0.8):
        running, count = 0.0, 0
        while running < total * share:
            running += cpu[count]
            count += 1
        print(f"{share:.0%} of the in-test CPU is in {count} tests")
    files: collections.defaultdict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for r in rows:
        counts = files[r["id"].split("::")[0]]
        counts[0] += r["self"]
        counts[1] += r["child"]
        counts[2] += 1
        counts[3] += r["tls_cpu"]
    print(f"\n{'CPU-s':>7} {'self':>7} {'child':>7} {'tls':>6} {'tests':>5}  file")
    for name, (own, waited, count, tls) in sorted(files.items(), key=lambda kv: -(kv[1][0] + kv[1][1]))[:top]:
        print(f"{own + waited:7.1f} {own:7.1f} {waited:7.1f} {tls:6.1f} {count:5.0f}  {name}")


if __name__ == "__main__":
    summarize(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(os.environ.get("AGENTGATE_CPU_DIR", ".")))
