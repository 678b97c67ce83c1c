"""Review R84: a private key's directory that a POSIX ACL lets another user write is one others
may change (docs/cli.md, Files). With a named entry in a directory's ACL, its mode's group bits
show the ACL's mask: a directory of the owner's private group with ``user:nobody:rwx`` looked like
one only that group may write, so ``load_signing_key`` read a key from it and ``keys new --dir``
wrote one there. The ACL is written as its raw extended attribute (``setfacl`` need not be
installed), so the test runs wherever the file system keeps POSIX ACLs, as any user."""

from __future__ import annotations

import errno
import os
import struct
from pathlib import Path

import pytest

from agentgate.cli.main import main
from agentgate.errors import KeyFileError
from agentgate.keys import SigningKey, load_signing_key, save_key, unsafe_directory

KEY = SigningKey(bytes(range(32)))
USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
NO_ID = 0xFFFFFFFF
UNKNOWN_GROUP = 54321
"""A gid no system here names: nobody can say who is in it, so it is no private group."""


def _set_acl(directory: Path, named: tuple[int, int, int], mask: int) -> None:
    """Give ``directory`` the ACL ``user::rwx``, the ``named`` entry (tag, permissions, id),
    ``group::r-x``, ``mask`` and ``other::---``; skip where no POSIX ACL can be set."""
    entries = [(USER_OBJ, 7, NO_ID), named, (GROUP_OBJ, 5, NO_ID), (MASK, mask, NO_ID), (OTHER, 0, NO_ID)]
    # The kernel takes the entries in the order of their tags only.
    acl = struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *entry) for entry in sorted(entries))
    setxattr = getattr(os, "setxattr", None)
    if setxattr is None:
        pytest.skip("no os.setxattr on this system: POSIX ACLs (extended attributes) cannot be set")
    try:
        setxattr(directory, "system.posix_acl_access", acl)
    except OSError as exc:
        if exc.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            pytest.skip(f"the file system of {directory} keeps no POSIX ACLs (extended attributes)")
        raise


@pytest.mark.parametrize(
    ("named", "who"),
    [((USER, 7, 65534), "user uid 65534"), ((GROUP, 7, UNKNOWN_GROUP), f"group gid {UNKNOWN_GROUP}")],
)
def test_a_key_directory_an_acl_lets_another_user_write_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], named: tuple[int, int, int], who: str
) -> None:
    directory = tmp_path / "keys"
    save_key(KEY, directory, "agent")
    _set_acl(directory, named, mask=7)
    said = unsafe_directory(directory / "agent.key")
    assert said is not None and said.startswith(f"{directory} (mode 07"), said
    assert f"its POSIX ACL lets {who} rename files in it; run setfacl -b {directory}" in said
    with pytest.raises(KeyFileError, match=r"private key is in a directory others may change: .*POSIX ACL"):
        load_signing_key(directory / "agent.key")
    assert main(["keys", "new", "second", "--dir", str(directory)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "cannot write a private key in a directory others may change" in err, err
    assert f"POSIX ACL lets {who}" in err and "Traceback" not in err
    assert sorted(p.name for p in directory.iterdir()) == ["agent.key", "agent.pub"]


def test_an_acl_entry_whose_write_the_mask_takes_away_is_no_writer(tmp_path: Path) -> None:
    """``user:nobody:rwx`` under ``mask::r-x`` is ``r-x`` in effect: nobody but the owner writes."""
    directory = tmp_path / "keys"
    save_key(KEY, directory, "agent")
    _set_acl(directory, (USER, 7, 65534), mask=5)
    assert unsafe_directory(directory / "agent.key") is None
    assert load_signing_key(directory / "agent.key").did == KEY.did


def test_an_acl_entry_that_only_reads_is_no_writer(tmp_path: Path) -> None:
    directory = tmp_path / "keys"
    save_key(KEY, directory, "agent")
    _set_acl(directory, (USER, 5, 65534), mask=7)
    assert load_signing_key(directory / "agent.key").did == KEY.did
