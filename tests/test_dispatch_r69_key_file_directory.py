"""A backend's API key file is read only from a directory chain nobody else may change (review
R69): until then only the file's own mode was checked, so a key file in a world-writable
directory was used although anyone could have renamed their own file into its place (and so
received every call's traffic meant for the backend's key, or sent a key of their choosing). The
rule is the one private keys follow, ``agentgate.keys.unsafe_directory`` (ssh's StrictModes)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from agentgate.dispatch import inventory_from_mapping
from agentgate.errors import BackendCredentialError

KEY = "sk-r69-directory-key"
OTHER_UID = 54321


def _inventory(key_file: Path) -> Any:
    backend = {
        "name": "b0",
        "url": "http://10.0.0.1:8000",
        "engine": "vllm",
        "models": ["llama-3.1-8b"],
        "api_key_file": str(key_file),
    }
    return inventory_from_mapping({"backends": [backend]})


def _key_file_in(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "vllm.key"
    path.write_text(KEY)
    path.chmod(0o600)
    return path


@pytest.mark.parametrize("mode", [0o777, 0o757])
def test_a_key_file_in_a_directory_others_may_write_is_refused(tmp_path: Path, mode: int) -> None:
    """Review R69: a 0600 API key file in a directory others may write (not sticky) was read and
    sent; anyone could have replaced it. Refused as a ``BackendCredentialError`` naming the
    backend, the file, the directory, its mode and the fix, never the key."""
    shared = tmp_path / "shared"
    path = _key_file_in(shared)
    shared.chmod(mode)
    with pytest.raises(BackendCredentialError) as caught:
        _inventory(path)
    message = str(caught.value)
    assert (
        f"backend 'b0': {path}: the API key file is in a directory others may change: {shared} "
        f"(mode {mode:04o}): group or others may rename files in it; run chmod go-w {shared}"
    ) in message
    assert "api_key_file" in message and KEY not in message
    shared.chmod(0o755)
    key = _inventory(path).backends[0].api_key
    assert key is not None and key.get_secret_value() == KEY


def test_a_key_file_below_a_world_writable_directory_is_refused(tmp_path: Path) -> None:
    """Review R69: a directory above the key file's own counts too: anyone may rename the key's
    directory away and put their own in its place."""
    open_dir = tmp_path / "open"
    path = _key_file_in(open_dir / "secrets")
    open_dir.chmod(0o777)
    with pytest.raises(BackendCredentialError, match=f"directory others may change: {open_dir} "):
        _inventory(path)


def test_a_key_file_in_a_sticky_directory_is_read(tmp_path: Path) -> None:
    """A sticky directory (as /tmp, 1777) lets only an entry's owner rename or remove it: a key
    file there is read (the tests' own key files live below /tmp)."""
    sticky = tmp_path / "sticky"
    path = _key_file_in(sticky)
    sticky.chmod(0o1777)
    key = _inventory(path).backends[0].api_key
    assert key is not None and key.get_secret_value() == KEY


def test_a_key_file_in_another_users_directory_is_refused_with_a_fix_that_fits(tmp_path: Path) -> None:
    """Review R69: a directory another user owns lets that user replace any file in it. Refused;
    the fix names no ``agentgate keys new`` (which makes a signing key pair, not a place for an
    API key, as the shared rule's words said at first), only a directory of one's own."""
    if os.geteuid() != 0:
        pytest.skip("giving a directory to another user needs root")
    theirs = tmp_path / "theirs"
    path = _key_file_in(theirs)
    os.chown(theirs, OTHER_UID, -1)
    with pytest.raises(BackendCredentialError) as caught:
        _inventory(path)
    message = str(caught.value)
    assert f"directory others may change: {theirs}: owned by uid {OTHER_UID}" in message
    assert "keys new" not in message and "mkdir -m 700 DIR" in message
