"""Review R92b of ``grant issue --out`` (agentgate/keys.py, ``_name_taken``): review R92 took an
empty file at ``--out`` that the user may not open (another user's ``mktemp``, mode 0600) without a
lock, recorded the grant, and renamed the token over it. In a sticky directory such as /tmp, or
for an immutable file, that rename fails (``EPERM``) once the grant is recorded: the token was
written nowhere and the user not told to revoke it; and two commands writing such a file were no
longer kept apart (review R72's defect). Such a file cannot be held while the token is written,
so it is refused before anything is recorded, with a message that says so (not "a file that is
not empty is there", as before R92), and ``--force`` replaces it where the user may.

The refusal of the open is made certain here, whatever the user: an ``os.open`` of FILE that does
not create it fails with ``EACCES``."""

from __future__ import annotations

from pathlib import Path

import pytest
from _cli import cli
from _raw_sqlite import query
from test_keys_r92_out_name_taken import _leftovers, empty_out, grant_argv, unopenable_out  # noqa: F401 (the fixtures)

from agentgate.keys import UnopenableFile, replace_file


def _untouched(tmp_path: Path, out_file: Path) -> None:
    """The empty file left as it was, and nothing else written beside it."""
    assert out_file.read_bytes() == b""
    assert _leftovers(tmp_path) == []


def _grant_issue(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *argv: str
) -> tuple[int, str, str]:
    """``agentgate`` run with ``argv``, the refusal of opening FILE undone after it."""
    ran = cli(capsys, *argv)
    monkeypatch.undo()
    return ran


def test_an_empty_file_the_user_may_not_open_is_refused_before_anything_is_done(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    unopenable_out: Path,  # noqa: F811 (the fixture)
) -> None:
    out_file = unopenable_out
    ran: list[bool] = []
    with pytest.raises(UnopenableFile):
        replace_file(out_file, b"ours\n", 0o600, lambda: ran.append(True), exclusive=True)
    monkeypatch.undo()
    assert ran == []  # where grant issue records the grant
    _untouched(tmp_path, out_file)


def test_grant_issue_refuses_it_with_a_true_message_and_records_nothing(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    grant_argv: list[str],  # noqa: F811 (the fixture)
    unopenable_out: Path,  # noqa: F811 (the fixture)
) -> None:
    out_file = unopenable_out
    code, out, err = _grant_issue(capsys, monkeypatch, *grant_argv)
    assert (code, out) == (2, ""), (code, out, err)
    assert err.count("\n") == 1, err
    assert err.startswith("agentgate: error: new.tok: a file you may not open is there: it cannot be held"), (
        err
    )
    assert "not empty" not in err and "nothing recorded" in err and "--force" in err, err
    assert query(tmp_path / "st.db", "SELECT count(*) FROM agentgate_grants") == [(0,)]
    _untouched(tmp_path, out_file)


def test_force_replaces_it_where_the_user_may(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    grant_argv: list[str],  # noqa: F811 (the fixture)
    unopenable_out: Path,  # noqa: F811 (the fixture)
) -> None:
    """What the refusal says of ``--force`` holds."""
    out_file = unopenable_out
    code, out, err = _grant_issue(capsys, monkeypatch, *grant_argv, "--force")
    assert (code, err) == (0, ""), (code, out, err)
    assert out.startswith("wrote new.tok (grant ")
    assert out_file.read_text(encoding="ascii").startswith("ag1.")
    assert _leftovers(tmp_path) == []
