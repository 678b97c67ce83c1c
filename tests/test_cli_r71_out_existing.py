"""`grant issue --out FILE` and `grant delegate --out FILE` over a file that holds something.

Until review R71 both replaced whatever regular file was there (exit 0), while `keys new` refuses
to replace a key. A token is not a secret, but the file may be the only copy of a grant handed
out: the store records the grant (and its token, in a column no verb prints), the grant stays live
until it expires or is revoked, and nothing in the command line gives its token back. Rule: a
non-empty file at `--out` is refused (exit 2, one line naming the file and `--force`, nothing
issued or recorded) unless `--force` is given; an empty file (`mktemp`'s) is written.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from _cli import cli

from agentgate.authority import parse_chain
from agentgate.store import SQLiteStore

_ISSUE = [
    "grant",
    "issue",
    "--issuer",
    "keys/ops-root.key",
    "--to",
    "keys/bob.pub",
    "--allow",
    "tool:x",
    "--ttl",
    "1h",
]
_DELEGATE = [
    "grant",
    "delegate",
    "bob.tok",
    "--as",
    "keys/bob.key",
    "--to",
    "keys/alice.pub",
    "--allow",
    "tool:x",
]


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Path:
    """A directory with three keys, a store, and bob's token in bob.tok."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "st.db"))
    for name in ("ops-root", "alice", "bob"):
        assert cli(capsys, "keys", "new", name, "--dir", "keys")[0] == 0
    assert cli(capsys, "store", "init")[0] == 0
    assert cli(capsys, *_ISSUE, "--out", "bob.tok")[0] == 0
    return tmp_path


def _grants(here: Path) -> int:
    with contextlib.closing(SQLiteStore(here / "st.db")) as store:
        return int(store.query("SELECT COUNT(*) FROM agentgate_grants")[0][0])


def _refused_over(capsys: pytest.CaptureFixture[str], argv: list[str], out: str) -> None:
    code, stdout, err = cli(capsys, *argv, "--out", out)
    assert (code, stdout) == (2, ""), (code, stdout, err)
    assert err.count("\n") == 1 and err.startswith(f"agentgate: error: {out}: "), err
    assert "--force" in err, err


def test_issue_refuses_to_replace_a_token_file_without_force(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R71: `grant issue --out bob.tok` over bob's token replaced it (exit 0): the grant it
    held stayed live and recorded, its only copy gone. Rule: exit 2 naming the file and
    `--force`, the file kept, no grant issued."""
    before = (here / "bob.tok").read_bytes()
    _refused_over(capsys, _ISSUE, "bob.tok")
    assert (here / "bob.tok").read_bytes() == before
    assert _grants(here) == 1


def test_delegate_refuses_to_replace_a_token_file_without_force(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R71: `grant delegate --out alice.tok` over the token delegated to alice last time
    replaced it (exit 0). Rule: exit 2 naming the file and `--force`, the file kept, nothing
    recorded."""
    assert cli(capsys, *_DELEGATE, "--ttl", "5m", "--out", "alice.tok")[0] == 0
    before, recorded = (here / "alice.tok").read_bytes(), _grants(here)
    _refused_over(capsys, [*_DELEGATE, "--ttl", "5m"], "alice.tok")
    assert (here / "alice.tok").read_bytes() == before
    assert _grants(here) == recorded


def test_force_replaces_the_token_file(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review R71: with `--force` the file is replaced, as before, and the new grant recorded."""
    old = parse_chain((here / "bob.tok").read_text().strip()).id
    code, out, err = cli(capsys, *_ISSUE, "--out", "bob.tok", "--force")
    assert code == 0, err
    new = parse_chain((here / "bob.tok").read_text().strip()).id
    assert new != old and out == f"wrote bob.tok (grant {new})\n"
    code, _out, err = cli(capsys, *_DELEGATE, "--ttl", "5m", "--out", "bob.tok", "--force")
    assert (code, err) == (
        2,
        "agentgate: error: bob.tok: cannot write: it is the token file delegated from (bob.tok); name another file\n",
    )
    assert cli(capsys, *_DELEGATE, "--ttl", "5m", "--out", "alice.tok")[0] == 0
    assert cli(capsys, *_DELEGATE, "--ttl", "5m", "--out", "alice.tok", "--force")[0] == 0
    assert _grants(here) == 4


def test_an_empty_file_such_as_mktemps_is_written_without_force(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R71: `TOK=$(mktemp); agentgate grant issue ... --out "$TOK"` names an empty file,
    which holds nothing to lose: it is written without `--force`."""
    (here / "empty.tok").touch()
    code, _out, err = cli(capsys, *_ISSUE, "--out", "empty.tok")
    assert code == 0, err
    assert parse_chain((here / "empty.tok").read_text().strip()).holder
    assert _grants(here) == 2
