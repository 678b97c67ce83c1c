"""Review R67: a command that writes a SQLite store it may not write says why, naming the place."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOBODY = 65534

# ``agentgate ARGV`` as ``nobody`` when root (as tests/test_store_hostile_files.py runs it).
_AS_NOBODY = f"""
import os, sys
from agentgate.cli.main import build_parser, main
build_parser()
if os.geteuid() == 0:
    os.setgroups([]); os.setgid({NOBODY}); os.setuid({NOBODY})
sys.exit(main(sys.argv[1:]))
"""


def agentgate(*argv: str, store: Path, as_nobody: bool = False) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AGENTGATE_STORE": str(store)}
    command = [sys.executable, "-c", _AS_NOBODY] if as_nobody else [sys.executable, "-m", "agentgate"]
    done = subprocess.run(
        [*command, *argv], cwd=store.parent, env=env, capture_output=True, text=True, timeout=120
    )
    return done.returncode, done.stderr


@pytest.fixture
def made_store() -> Iterator[Path]:
    """A store made by ``agentgate store init`` in a directory others may read, not write."""
    place = Path(tempfile.mkdtemp(prefix="agentgate-r67-"))
    place.chmod(0o755)
    store = place / "s.db"
    assert agentgate("store", "init", store=store)[0] == 0
    store.chmod(0o644)
    yield store
    subprocess.run(["umount", str(place)], capture_output=True, check=False)
    shutil.rmtree(place, ignore_errors=True)


def test_a_store_on_a_read_only_file_system_is_named_so(made_store: Path) -> None:
    """Review R67: ``agentgate audit checkpoint`` (or ``grant revoke``, ``store init``) on a store
    whose file system is mounted read-only said ``cannot open the SQLite store s.db: unable to
    open database file``, which reads as a missing or damaged file; it now says that the place is
    on a read-only file system and that this command writes. The verbs that only read still read."""
    place = made_store.parent
    kept = Path(tempfile.mkdtemp(prefix="agentgate-r67-kept-"))
    shutil.copy(made_store, kept / "s.db")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(place)], capture_output=True, check=False)
    if mounted.returncode != 0:
        shutil.rmtree(kept)
        pytest.skip("no tmpfs can be mounted here (not root, or no CAP_SYS_ADMIN)")
    shutil.copy(kept / "s.db", made_store)
    shutil.rmtree(kept)
    subprocess.run(["mount", "-o", "remount,ro", str(place)], check=True)
    code, err = agentgate("audit", "checkpoint", store=made_store)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"agentgate: error: cannot open the SQLite store {made_store}: "), err
    assert f"{place} is on a read-only file system, and this command writes the store" in err, err
    assert agentgate("approval", "list", store=made_store)[0] == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="runs the command as nobody, which takes root")
def test_a_store_this_account_may_not_write_is_named_so(made_store: Path) -> None:
    """Review R67: ``agentgate audit checkpoint`` as an account that may read the store but not
    write it, nor its directory, said ``attempt to write a readonly database`` alone; it now also
    names what it may not write and that this command writes."""
    code, err = agentgate("audit", "checkpoint", store=made_store, as_nobody=True)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"{made_store.parent} may not be written by this account, and this command writes the store" in err
