"""Review R72 (helper r72-rev-e): ``replace_file(..., exclusive=True)``, which ``grant issue`` and
``grant delegate --out`` use so that a file made at ``--out`` while the token is written is kept.

The name is taken with an empty placeholder before the grant is recorded; a second writer of the
same name (another ``grant issue --out`` of the same file, run at the same moment) found that
placeholder, took it for an empty file a user had left (``mktemp``), which is written without
``--force``, and renamed its token over it: the first writer then renamed its own over the second
one's, and both said they had written the file. The second writer is run here inside the first
one's window (its ``before_rename``, where the grant is recorded), with real files: once as the
function, once as a real ``agentgate`` process.
"""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from agentgate.keys import FilledFile, replace_file


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith(".agentgate-"))


def test_a_second_writer_does_not_take_the_first_ones_placeholder(tmp_path: Path) -> None:
    """Review R72: a second exclusive writer took the first one's placeholder for a user's empty
    file and wrote over it; the first then renamed its own file over the second's, and neither
    raised: one token lost, both said written. Rule: the second is refused (``FilledFile``) while
    the first holds the name, and the file holds the first one's bytes."""
    out = tmp_path / "new.tok"
    said: list[str] = []

    def second_writer() -> None:
        try:
            replace_file(out, b"second\n", 0o600, exclusive=True)
            said.append("written")
        except FilledFile:
            said.append("refused")

    replace_file(out, b"first\n", 0o600, second_writer, exclusive=True)
    assert said == ["refused"]
    assert out.read_bytes() == b"first\n"
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert _leftovers(tmp_path) == []


def test_a_file_put_over_the_placeholder_is_kept(tmp_path: Path) -> None:
    """Review R72: a writer that does not take the name exclusively (a ``mv`` of its own file
    over it) between the placeholder and the rename had its file replaced, the same race moved
    past the look. Rule: its file is kept, the write refused (``FilledFile``)."""
    out = tmp_path / "new.tok"
    theirs = tmp_path / "theirs"

    def moved_over() -> None:
        theirs.write_bytes(b"theirs\n")
        os.replace(theirs, out)

    with pytest.raises(FilledFile):
        replace_file(out, b"ours\n", 0o600, moved_over, exclusive=True)
    assert out.read_bytes() == b"theirs\n"
    assert _leftovers(tmp_path) == []


def test_an_interrupted_write_leaves_neither_placeholder_nor_temporary(tmp_path: Path) -> None:
    """Review R72 (found sound, kept so): Ctrl-C (KeyboardInterrupt) while the grant is recorded leaves --out as it was
    (no file) and no temporary file."""
    out = tmp_path / "new.tok"

    def interrupted() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        replace_file(out, b"ours\n", 0o600, interrupted, exclusive=True)
    assert not out.exists()
    assert _leftovers(tmp_path) == []


def test_two_grant_issues_of_one_out_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Review R72: a second ``agentgate grant issue --out F`` run while the first recorded its
    grant wrote F (exit 0), and the first then replaced it (exit 0): the second's token was lost
    though it said `wrote F`. Rule: the second is refused (exit 2, one line, nothing recorded),
    and F holds the first one's token. The second is a real process; it runs inside the first
    one's record, before the first opens the store."""
    import agentgate.cli.grant as grant_cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "st.db"))
    quiet = _Quiet()
    for name in ("ops-root", "bob"):
        assert quiet.run("keys", "new", name, "--dir", "keys") == 0
    assert quiet.run("store", "init") == 0
    argv = ["grant", "issue", "--issuer", "keys/ops-root.key", "--to", "keys/bob.pub", "--allow", "tool:x"]
    argv += ["--ttl", "1h", "--out", "new.tok"]
    recorded = grant_cli.record
    second: list[subprocess.CompletedProcess[str]] = []

    def second_then_record(repo: object, chain: object) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        second.append(
            subprocess.run(
                [sys.executable, "-m", "agentgate", *argv],
                capture_output=True,
                text=True,
                env=env,
                check=False,
            )
        )
        recorded(repo, chain)  # type: ignore[arg-type]

    monkeypatch.setattr(grant_cli, "record", second_then_record)
    code = quiet.run(*argv)
    assert code == 0
    [done] = second
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("agentgate: error: new.tok: another command is writing a token to it"), (
        done.stderr
    )
    first_token = (tmp_path / "new.tok").read_text()
    assert first_token.startswith("ag1.") and first_token not in done.stdout
    assert _leftovers(tmp_path) == []


class _Quiet:
    """``agentgate ARGV`` in this process, its output discarded."""

    def run(self, *argv: str) -> int:
        from agentgate.cli.main import main

        try:
            return main(list(argv))
        except SystemExit as exc:
            return int(exc.code or 0)


def test_a_file_moved_over_the_placeholder_while_the_grant_is_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R72: a file moved over --out's placeholder (``mv``, no lock) while the grant was
    recorded was replaced by the token. Rule: it is kept; exit 2, one line naming the file, saying
    the grant was recorded and its token not written, and how to revoke it."""
    import agentgate.cli.grant as grant_cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "st.db"))
    quiet = _Quiet()
    for name in ("ops-root", "bob"):
        assert quiet.run("keys", "new", name, "--dir", "keys") == 0
    assert quiet.run("store", "init") == 0
    recorded = grant_cli.record

    def moved_then_record(repo: object, chain: object) -> None:
        (tmp_path / "theirs").write_bytes(b"theirs\n")
        os.replace(tmp_path / "theirs", tmp_path / "new.tok")
        recorded(repo, chain)  # type: ignore[arg-type]

    monkeypatch.setattr(grant_cli, "record", moved_then_record)
    argv = ["grant", "issue", "--issuer", "keys/ops-root.key", "--to", "keys/bob.pub", "--allow", "tool:x"]
    code, err = _Captured().run(*argv, "--ttl", "1h", "--out", "new.tok")
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("agentgate: error: new.tok: a file was put there"), err
    assert "agentgate grant revoke " in err, err
    assert (tmp_path / "new.tok").read_bytes() == b"theirs\n"
    assert _leftovers(tmp_path) == []


class _Captured:
    """``agentgate ARGV`` in this process: its exit status and what it wrote on standard error."""

    def run(self, *argv: str) -> tuple[int, str]:
        import contextlib
        import io

        from agentgate.cli.main import main

        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            code = main(list(argv))
        return code, err.getvalue()


def test_a_file_system_without_hard_links_is_still_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R72: linking the token in place of the placeholder fails on a file system without
    hard links (FAT on a USB stick, some network mounts: ``EPERM``), after the grant is recorded;
    the token is then renamed in place, as before. The one part stood in for: ``os.link``
    raising as FAT's does (no such file system can be mounted here)."""

    def no_links(*args: object, **kwargs: object) -> None:
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    out = tmp_path / "new.tok"
    replace_file(out, b"ours\n", 0o600, exclusive=True)
    assert out.read_bytes() == b"ours\n"
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    assert _leftovers(tmp_path) == []
