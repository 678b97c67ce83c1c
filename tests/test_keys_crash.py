"""``keys new`` killed outright (SIGKILL) between linking its two files.

A real ``agentgate keys new`` process is paused right after its first link (``os.link`` wrapped
to print and sleep, in that process only) and killed there. Before: ``NAME.pub`` was linked
first, so the kill left a public key without its private key, and the next ``keys new`` refused
because ``NAME.pub`` existed. Now ``NAME.pub`` is the commit point: the kill leaves at most a
``NAME.key`` still linked to a temporary file, which the next ``keys new`` in the directory
removes with the temporary files.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agentgate.errors import KeyFileError
from agentgate.keys import SigningKey, load_public_key, load_signing_key, save_key

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

# Runs `agentgate keys new NAME --dir DIR` with os.link paused (forever) after its first link.
PAUSED = """
import os, sys, time
real = os.link
def link(*args, **kwargs):
    real(*args, **kwargs)
    print("linked", os.path.basename(args[1]), flush=True)
    time.sleep(600)
os.link = link
from agentgate.cli.main import main
sys.exit(main(["keys", "new", sys.argv[1], "--dir", sys.argv[2]]))
"""


def _paused_keys_new(name: str, directory: Path) -> tuple[subprocess.Popen[str], str]:
    """A ``keys new`` process stopped right after its first link, and the name it linked."""
    process = subprocess.Popen(
        [sys.executable, "-c", PAUSED, name, str(directory)],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()  # blocks until the first link happened (or the process died)
    assert line.startswith("linked "), (line, process.stderr.read() if process.poll() is not None else "")
    return process, line.split()[1]


def _kill(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait(30)
    for pipe in (process.stdout, process.stderr):
        if pipe is not None:
            pipe.close()


def _keys_new(name: str, directory: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "agentgate.cli.main", "keys", "new", name, "--dir", str(directory)]
    return subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=60, check=False)


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def _assert_pair(directory: Path, name: str, did: str) -> None:
    assert load_signing_key(directory / f"{name}.key").did == did
    assert load_public_key(directory / f"{name}.pub").did == did


def test_killed_between_the_links_never_leaves_a_pub_without_its_key(tmp_path: Path) -> None:
    directory = tmp_path / "keys"
    process, first = _paused_keys_new("k", directory)
    _kill(process)
    assert first == "k.key"  # the private key is linked first, the .pub is the commit point
    names = _names(directory)
    assert "k.pub" not in names, names
    assert "k.key" in names and any(n.startswith(".agentgate-keypair-") for n in names), names
    # The next `keys new` of that name removes the half-made pair and writes a whole one.
    again = _keys_new("k", directory)
    assert again.returncode == 0, again.stderr
    _assert_pair(directory, "k", again.stdout.strip())
    assert _names(directory) == ["k.key", "k.pub"]


def test_a_later_keys_new_of_another_name_cleans_up_and_keeps_a_users_own_key(tmp_path: Path) -> None:
    """Only a key still linked to a temporary file of ``keys new`` is removed; a key the user put
    there without a .pub (nlink 1) stays."""
    directory = tmp_path / "keys"
    process, _ = _paused_keys_new("k", directory)
    _kill(process)
    mine = _keys_new("mine", directory)
    assert mine.returncode == 0, mine.stderr
    (directory / "mine.pub").unlink()  # the user's key without its .pub
    other = _keys_new("other", directory)
    assert other.returncode == 0, other.stderr
    _assert_pair(directory, "other", other.stdout.strip())
    assert _names(directory) == ["mine.key", "other.key", "other.pub"]
    assert load_signing_key(directory / "mine.key").did == mine.stdout.strip()


def test_a_keys_new_in_progress_is_waited_for_not_cleaned_up(tmp_path: Path) -> None:
    """While a live ``keys new`` holds the directory, another one waits for it (its half-made pair
    is not taken for a leftover); once the first is killed, the second cleans up and finishes."""
    directory = tmp_path / "keys"
    process, _ = _paused_keys_new("k", directory)
    second = subprocess.Popen(
        [sys.executable, "-m", "agentgate.cli.main", "keys", "new", "k2", "--dir", str(directory)],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(1.5)  # far more than the second needs to start and reach the lock
        assert second.poll() is None  # waiting for the lock
        assert "k.key" in _names(directory)  # the live process's key is untouched
    finally:
        _kill(process)
    out, err = second.communicate(timeout=30)
    assert second.returncode == 0, err
    _assert_pair(directory, "k2", out.strip())
    assert _names(directory) == ["k2.key", "k2.pub"]


def test_an_os_error_after_the_key_was_linked_takes_the_key_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second link failing with an OSError (no space) raises KeyFileError and leaves nothing."""
    real = os.link
    calls = [0]

    def link(*args: Any, **kwargs: Any) -> None:
        calls[0] += 1
        if calls[0] == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(*args, **kwargs)

    monkeypatch.setattr(os, "link", link)
    with pytest.raises(KeyFileError, match="No space left on device"):
        save_key(SigningKey.generate(), tmp_path, "k")
    assert _names(tmp_path) == []
