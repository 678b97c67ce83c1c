"""A private key is used only from a directory chain nobody else may change (review R69): until
then only the key file's own mode and owner were checked, so a key in a world-writable directory
(or below one) was used although anyone could have replaced it, as ssh's StrictModes refuses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from _cli import cli

from agentgate.errors import KeyFileError
from agentgate.keys import SigningKey, load_signing_key, save_key

KEY = SigningKey(bytes(range(32)))
OTHER_UID = 54321


def _key_in(directory: Path, mode: int) -> Path:
    """``KEY`` saved in ``directory`` (made 0700 by ``save_key``), then the directory set to
    ``mode``."""
    key_path, _ = save_key(KEY, directory, "root")
    directory.chmod(mode)
    return key_path


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757, 0o730])
def test_a_key_in_a_directory_group_or_others_may_write_is_refused(tmp_path: Path, mode: int) -> None:
    """Review R69: a key in a directory that group or others may write (not sticky) was used;
    anyone who may write there can rename another key into its place. Refused, naming the
    directory, its mode and the fix. The group is one of no known members (a user private
    group may write: below)."""
    shared = tmp_path / "shared"
    key_path = _key_in(shared, mode)
    if mode & 0o020 and not mode & 0o002:
        if os.geteuid() != 0:
            pytest.skip("giving a directory to a group of others needs root")
        os.chown(shared, -1, OTHER_UID)  # a group id the system does not know
    with pytest.raises(KeyFileError) as caught:
        load_signing_key(key_path)
    message = str(caught.value)
    assert message.startswith(f"{key_path}: private key is in a directory others may change: {shared}")
    assert f"mode {mode:04o}" in message and f"chmod go-w {shared}" in message


def test_a_key_below_a_world_writable_directory_is_refused(tmp_path: Path) -> None:
    """Review R69: only a key's own directory could matter at most; one above it that anyone may
    write lets anyone rename the key's directory away and put their own in its place."""
    open_dir = tmp_path / "open"
    key_path = _key_in(open_dir / "keys", 0o700)
    open_dir.chmod(0o777)
    with pytest.raises(KeyFileError, match=f"directory others may change: {open_dir} "):
        load_signing_key(key_path)
    open_dir.chmod(0o755)
    assert load_signing_key(key_path).did == KEY.did


def test_a_key_reached_through_a_link_in_a_world_writable_directory_is_refused(tmp_path: Path) -> None:
    """Review R69: the directories of the path as given count as well as those of the file it
    reaches: a link in a world-writable directory can be pointed at another key by anyone."""
    key_path = _key_in(tmp_path / "safe", 0o700)
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    (open_dir / "link").symlink_to(tmp_path / "safe")
    open_dir.chmod(0o777)
    with pytest.raises(KeyFileError, match=f"directory others may change: {open_dir} "):
        load_signing_key(open_dir / "link" / key_path.name)
    assert load_signing_key(key_path).did == KEY.did


def test_a_sticky_world_writable_directory_of_its_user_is_accepted(tmp_path: Path) -> None:
    """A sticky directory (as /tmp, mode 1777) lets nobody but an entry's owner rename or remove
    it: a key there, or below it, is used (the tests' own keys live below /tmp)."""
    key_path = _key_in(tmp_path / "sticky", 0o1777)
    assert load_signing_key(key_path).did == KEY.did
    assert os.stat("/tmp").st_mode & 0o1000 or pytest.skip("/tmp is not sticky here")


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
@pytest.mark.parametrize("mode", [0o755, 0o1777])
def test_a_key_in_a_directory_another_user_owns_is_refused(tmp_path: Path, mode: int) -> None:
    """Review R69: a directory's owner may replace any file in it (sticky or not): a key in a
    directory of another user than this process's (or root) is refused, naming the owner."""
    theirs = tmp_path / "theirs"
    key_path = _key_in(theirs, mode)
    os.chown(theirs, OTHER_UID, -1)
    with pytest.raises(KeyFileError, match=f"{theirs}: owned by uid {OTHER_UID}"):
        load_signing_key(key_path)


def test_grant_issue_refuses_an_issuer_key_in_a_world_writable_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R69: ``grant issue --issuer`` signed with a key from a world-writable directory.
    Now exit 2 with one error line naming the directory and the fix, and no token written."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "store.db"))
    assert cli(capsys, "keys", "new", "root", "--dir", "k")[0] == 0
    assert cli(capsys, "keys", "new", "alice", "--dir", "k")[0] == 0
    Path("k").chmod(0o777)
    code, out, err = cli(
        capsys, "grant", "issue", "--issuer", "k/root.key", "--to", "k/alice.pub", "--allow", "tool:x",
        "--out", "a.tok",
    )  # fmt: skip
    assert (code, out, err.count("\n")) == (2, "", 1)
    assert "directory others may change: " in err and "chmod go-w " in err
    assert not Path("a.tok").exists()


def test_keys_new_refuses_to_write_into_a_world_writable_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R69: ``keys new --dir`` wrote a private key into a world-writable directory, where
    it could be replaced before first use and where no command would then read it. Refused, with
    nothing written."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    code, out, err = cli(capsys, "keys", "new", "root", "--dir", str(shared))
    assert (code, out) == (2, "")
    assert err.startswith(
        f"agentgate: error: {shared}: cannot write a private key in a directory others may change: {shared}"
    )
    assert sorted(shared.iterdir()) == []


def test_keys_new_makes_no_directory_below_a_world_writable_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R69: refused below a world-writable directory, ``keys new --dir NEW`` still left
    ``NEW`` made: ``NEW`` is not made. The directories ``--dir a/b/keys`` makes above ``keys``
    got the umask's mode (0777 under umask 000), where the key would be refused when read; since
    review R89 each is made 0700 whatever the umask, and the pair written there."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    code, _, err = cli(capsys, "keys", "new", "root", "--dir", str(shared / "keys"))
    assert code == 2 and f"directory others may change: {shared} " in err
    assert not (shared / "keys").exists()
    old = os.umask(0o000)
    try:
        code, out, err = cli(capsys, "keys", "new", "root", "--dir", str(tmp_path / "a" / "b" / "keys"))
    finally:
        os.umask(old)
    assert (code, err) == (0, "")
    for made in (tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "keys"):
        assert made.stat().st_mode & 0o777 == 0o700
    assert load_signing_key(tmp_path / "a" / "b" / "keys" / "root.key").did == out.strip()


def _own_private_group() -> bool:
    """Whether this process's group is a user private group of its user alone."""
    import grp
    import pwd

    gid, name = os.getegid(), pwd.getpwuid(os.geteuid()).pw_name
    others = [user for user in pwd.getpwall() if user.pw_gid == gid and user.pw_uid != os.geteuid()]
    return not others and all(member == name for member in grp.getgrgid(gid).gr_mem)


def test_a_directory_its_users_private_group_may_write_is_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under a umask of 002 (Ubuntu's and Fedora's for a user whose group is their own) every
    directory a user makes is 0775, a checkout and its ``keys`` included: its group, the user's
    private group, holds nobody else, so a key there is used and ``keys new`` writes there, as
    Debian's ssh accepts such a directory."""
    if not _own_private_group():
        pytest.skip("this process's group is not a private group of its user alone")
    project = tmp_path / "project"
    project.mkdir()
    os.chown(project, -1, os.getegid())
    project.chmod(0o775)
    code, _, err = cli(capsys, "keys", "new", "root", "--dir", str(project / "keys"))
    assert (code, err) == (0, "")
    assert load_signing_key(project / "keys" / "root.key").did.startswith("did:key:")


def test_an_example_under_a_world_writable_demo_dir_ends_in_one_line(tmp_path: Path) -> None:
    """Review R69: with the directory rule, an example whose ``AGENTGATE_DEMO_DIR`` lies in a
    world-writable directory ended in a ``KeyFileError`` traceback from ``save_key``; it is one
    line and status 2, as any demo directory it cannot use."""
    root = Path(__file__).resolve().parents[1]
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    env = {**os.environ, "PYTHONPATH": str(root), "AGENTGATE_DEMO_DIR": str(shared)}
    run = subprocess.run(
        [sys.executable, str(root / "examples" / "support_agent.py")],
        capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.count("\n") == 1 and f"directory others may change: {shared} " in run.stderr


def test_a_relative_key_path_in_a_removed_working_directory_is_one_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R69: the directory check looks the working directory up (``os.getcwd``), which
    fails once it was removed: ``keys new --dir keys`` there must still end in one line,
    exit 2, saying so (it said "cannot write the output: No such file or directory", main's
    line for a standard output it cannot write)."""
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    code, out, err = cli(capsys, "keys", "new", "root", "--dir", "keys")
    assert (code, out, err.count("\n")) == (2, "", 1)
    assert err.startswith(
        "agentgate: error: keys: cannot write a private key in a directory others may change: "
    )
    assert "the working directory, which cannot be found" in err
