"""Review R89: a SQLite store path whose last part is empty or ``.`` (``--store state/``,
``--store state/.``, ``AGENTGATE_STORE=fresh/``) names a directory, but ``Path`` drops the
separator, and agentgate created a SQLite file named ``state`` (exit 0): a store beside the one
meant, and the ``state/agentgate.db`` meant next was refused, ``state`` being a file. Such a path
is now refused by every verb and by ``open_store`` (exit 2, one line naming it), nothing made."""

from __future__ import annotations

from pathlib import Path

import pytest
from _cli import cli

from agentgate.errors import StoreError
from agentgate.store import open_store


def _refused(code: int, out: str, err: str, name: str) -> None:
    assert code == 2 and out == "", (code, out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and "that names a directory" in lines[0] and name in lines[0], err


@pytest.mark.parametrize("name", ["state/", "state/.", "state//", "state/./", ".", "./"])
def test_store_init_at_a_directory_name_makes_nothing(
    name: str, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    _refused(*cli(capsys, "store", "init", "--store", name), name)
    assert list(tmp_path.iterdir()) == []
    assert cli(capsys, "store", "init", "--store", "state/agentgate.db")[0] == 0
    assert (tmp_path / "state" / "agentgate.db").is_file()


def test_grant_issue_with_such_a_store_records_and_writes_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("root", "bob"):
        assert cli(capsys, "keys", "new", name, "--dir", "k")[0] == 0
    monkeypatch.setenv("AGENTGATE_STORE", "fresh/")
    argv = ["grant", "issue", "--issuer", "k/root.key", "--to", "k/bob.pub", "--allow", "tool:x"]
    _refused(*cli(capsys, *argv, "--ttl", "1h", "--out", "t.tok"), "fresh/")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k"]


def test_a_verb_that_reads_does_not_take_a_store_file_followed_by_a_slash(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert cli(capsys, "store", "init", "--store", "a.db")[0] == 0
    for argv in (["approval", "list"], ["tasks", "breakers"], ["audit", "verify"]):
        _refused(*cli(capsys, *argv, "--store", "a.db/"), "a.db/")


@pytest.mark.parametrize("url", ["x/", "x/.", "sqlite:///x/", "sqlite:///x/."])
def test_open_store_refuses_a_directory_name(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for create in (True, False):
        with pytest.raises(StoreError, match="that names a directory"):
            open_store(url, create=create)
    assert list(tmp_path.iterdir()) == []


def test_an_empty_sqlite_url_names_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(StoreError, match=r"the sqlite:/// store URL names no file"):
        open_store("sqlite:///")


def test_a_name_that_only_ends_in_a_dot_is_still_a_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("agentgate.", "s/..db"):
        open_store(name).close()
        assert Path(name).is_file()
