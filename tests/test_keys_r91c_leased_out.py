"""Review R91c of the file outputs (agentgate/keys.py, ``replace_file``): before an output
replaces the regular file at its path, that file is opened to see whether it holds what no output
may replace (``_irreplaceable``). Since review R91b it is opened without blocking, so that a FIFO
put there is not waited on.

A regular file another process holds a kernel lease on (as Samba's oplocks and knfsd's delegations
are) refuses a non-blocking open with ``EWOULDBLOCK`` while its holder is told to let go: the
output was refused as "a file that could not be checked (Resource temporarily unavailable)", even
an empty one, where the blocking open before waited for the lease's break, checked the file and
replaced it. So was a file whose file system honours ``O_NONBLOCK`` on reads (``EAGAIN`` from
``read``). Both are checked, and replaced, again."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentgate.keys import replace_file

HOLDER = """
import fcntl, os, signal, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
def let_go(*_):  # a lease's holder gives it up when told to, as Samba does
    fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_UNLCK)
    print("let go", flush=True)
signal.signal(signal.SIGIO, let_go)
try:
    fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_WRLCK)
except OSError as exc:
    print("no lease:", exc, flush=True)
    sys.exit()
print("held", flush=True)
time.sleep(30)
"""


KEY = b"-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n"


@contextlib.contextmanager
def _leased(out: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding a write lease on the file ``out``, given up when it is told to."""
    if not hasattr(fcntl, "F_SETLEASE"):
        pytest.skip("no kernel leases here (Linux only)")
    with subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(out)], stdout=subprocess.PIPE, text=True
    ) as holder:
        try:
            assert holder.stdout is not None
            said = holder.stdout.readline().strip()
            if said != "held":
                pytest.skip(f"a lease cannot be taken here ({said})")
            yield holder
        finally:
            holder.kill()


@pytest.mark.parametrize("earlier", [b"{}\n", b""], ids=["earlier_output", "empty"])
def test_a_leased_regular_file_is_checked_and_replaced_once_let_go(tmp_path: Path, earlier: bytes) -> None:
    out = tmp_path / "schema.json"
    out.write_bytes(earlier)
    with _leased(out) as holder:
        replace_file(out, b'{"new": 1}\n', 0o644)
        assert holder.stdout is not None and holder.stdout.readline().strip() == "let go"
    assert out.read_bytes() == b'{"new": 1}\n'


def test_a_leased_private_key_is_still_refused(tmp_path: Path) -> None:
    out = tmp_path / "schema.json"
    out.write_bytes(KEY)
    with _leased(out), pytest.raises(OSError, match="a private key is there"):
        replace_file(out, b'{"new": 1}\n', 0o644)
    assert out.read_bytes() == KEY


def test_a_file_system_refusing_non_blocking_reads_does_not_refuse_the_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "schema.json"
    out.write_bytes(b"{}\n")
    real_read = os.read

    def read_as_such_a_file_system(fd: int, size: int) -> bytes:
        if not os.get_blocking(fd):
            raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN))
        return real_read(fd, size)

    monkeypatch.setattr(os, "read", read_as_such_a_file_system)
    replace_file(out, b'{"new": 1}\n', 0o644)
    assert out.read_bytes() == b'{"new": 1}\n'
