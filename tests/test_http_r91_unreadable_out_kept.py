"""Review R91 of the file outputs (agentgate/keys.py, ``replace_file``): an ``--out`` that names
a regular file holding a private key is refused, whatever its name, and so now is one that is not
empty and that the user cannot read, as it may hold one.

The file was read to see what it held, and one that could not be read was "left to the write to
judge"; but a rename needs no right to the file it replaces, so another user's private key (mode
0600) in a directory the caller may write to was replaced by ``policy schema --out``.

Run as root (who reads every file), the command runs in a child that drops to ``nobody`` once its
imports are made; as any other user, the key is made unreadable by its mode. A throwaway child
first tries what the test needs (review R91b): to become ``nobody`` (root in a user namespace where
it is not mapped, or without CAP_SETUID, cannot), to write in the directory (a temporary directory
under one ``nobody`` cannot enter), and to be refused a file its mode forbids (a user with
CAP_DAC_READ_SEARCH, a file system that keeps no modes). Where it cannot, the tests are skipped,
saying why: they failed there, for the environment, not for the code.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import agentgate
from agentgate.keys import SigningKey, save_key

CHILD = """
import contextlib, io, os, sys
from agentgate.cli.main import main
warm = sys.argv[1]
with open(warm + ".key", "w") as key:
    key.write("-----BEGIN PRIVATE KEY-----\\n")
with contextlib.redirect_stderr(io.StringIO()):  # every import made while they can be read:
    main(["policy", "schema", "--out", warm + ".json"])  # the written file's
    main(["policy", "schema", "--out", warm + ".key"])  # and the refusal's
if os.geteuid() == 0:
    os.setgid(int(sys.argv[3]))
    os.setuid(int(sys.argv[3]))
sys.exit(main(["policy", "schema", "--out", sys.argv[2]]))
"""


PROBE = """
import os, sys
directory, secret, uid = sys.argv[1], sys.argv[2], int(sys.argv[3])
step = f"become uid {uid}"
try:
    if os.geteuid() == 0:
        os.setgid(uid)
        os.setuid(uid)
    step = f"write in {directory}"
    made = os.path.join(directory, "probe")
    with open(made, "w"):
        pass
    os.replace(made, made + ".moved")  # as the command writes its output
    os.unlink(made + ".moved")
except OSError as exc:
    sys.exit(f"the child cannot {step}: {exc}")
try:
    open(secret, "rb").close()
except PermissionError:
    sys.exit(0)
sys.exit(f"the child reads {secret} though its mode forbids it: file modes are not enforced here")
"""


def _nobody() -> int | None:
    """The uid the child takes (root only), or ``None`` when it runs as the test does."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        pytest.skip("run as root with no user 'nobody' to be")


@pytest.fixture
def directory() -> Iterator[Path]:
    """A directory the child may write to (in the system's temporary directory: a pytest one is
    root's alone, 0700), its own when it drops to ``nobody``; the tests are skipped where the child
    cannot write in it or read what its mode forbids (``PROBE``)."""
    made = Path(tempfile.mkdtemp(prefix="agentgate-r91-"))
    try:
        _probe(made)
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


def _probe(directory: Path) -> None:
    """Skip the test unless a throwaway child can do in ``directory``, given to it, what the
    test's does, and is refused a file made unreadable as the test makes its own."""
    uid = _nobody()
    if uid is not None:
        try:
            os.chown(directory, uid, -1)
        except OSError as exc:  # EINVAL: a user namespace where uid ``uid`` is not mapped
            pytest.skip(f"run as root that cannot give a directory to 'nobody' (uid {uid}): {exc}")
    secret = directory / "probe.key"
    secret.write_bytes(b"secret")
    os.chmod(secret, 0o600 if uid is not None else 0)
    probed = subprocess.run(
        [sys.executable, "-c", PROBE, str(directory), str(secret), str(uid or 0)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    secret.unlink()
    if uid is not None:
        os.chown(directory, 0, -1)  # root's again until the test's key is saved (``_unreadable``)
    if probed.returncode != 0:
        pytest.skip(probed.stderr.strip().splitlines()[-1] if probed.stderr.strip() else str(probed))


def _unreadable(path: Path, directory: Path) -> None:
    """Make ``path`` unreadable to the child, and ``directory`` its own to write to."""
    uid = _nobody()
    os.chmod(path, 0o600 if uid is not None else 0)
    if uid is not None:
        os.chown(directory, uid, -1)


def _schema_out(directory: Path, out: Path) -> subprocess.CompletedProcess[str]:
    """``agentgate policy schema --out OUT``, run by the child."""
    uid = _nobody()
    env = {**os.environ, "PYTHONPATH": str(Path(agentgate.__file__).parents[1])}
    return subprocess.run(
        [sys.executable, "-c", CHILD, str(directory / "warm"), str(out), str(uid or 0)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_a_private_key_the_user_cannot_read_is_not_replaced(directory: Path) -> None:
    """Review R91: the unreadable key was replaced by the schema (exit 0, 'wrote ...')."""
    key_path, _ = save_key(SigningKey.generate(), directory, "svc")
    before = key_path.read_bytes()
    _unreadable(key_path, directory)
    done = _schema_out(directory, key_path)
    assert done.returncode == 2, done
    assert "cannot be read (it may hold a private key)" in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert key_path.read_bytes() == before


def test_an_empty_file_the_user_cannot_read_is_replaced(directory: Path) -> None:
    """An empty file holds nothing to lose: it is replaced, as a readable one is."""
    empty = directory / "schema.json"
    empty.touch()
    _unreadable(empty, directory)
    done = _schema_out(directory, empty)
    assert done.returncode == 0, done
    assert empty.read_bytes().startswith(b"{")
