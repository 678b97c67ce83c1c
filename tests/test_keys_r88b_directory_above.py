"""``save_key`` (``agentgate keys new --dir DIR``) makes no directory that ``DIR`` goes up out of
with ``..`` (review R88, as the SQLite store's directory): the kernel reads ``..`` after what
comes before it, so ``k/new/..`` names nothing until ``k/new`` is made. Until then ``k/new`` was
made (``mkdir -p``) and the pair written beside it."""

from __future__ import annotations

from pathlib import Path

import pytest
from _cli import cli

from agentgate.errors import KeyFileError
from agentgate.keys import SigningKey, save_key


@pytest.mark.parametrize("after", [(), ("made",)], ids=["k/new/..", "k/new/../made"])
def test_a_directory_the_key_directory_goes_up_out_of_is_not_made(
    tmp_path: Path, after: tuple[str, ...]
) -> None:
    (tmp_path / "k").mkdir()
    directory = tmp_path / "k" / "new" / ".." / Path(*after)
    with pytest.raises(KeyFileError, match=r"cannot create the key directory: .*new/\.\. names no directory"):
        save_key(SigningKey.generate(), directory, "me")
    assert list((tmp_path / "k").iterdir()) == []


def test_keys_new_at_such_a_directory_makes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = cli(capsys, "keys", "new", "--dir", str(tmp_path / "k" / "new" / ".."), "me")
    assert code == 2
    assert "names no directory" in err, err
    assert list(tmp_path.iterdir()) == []


def test_directories_after_the_last_step_up_are_made(tmp_path: Path) -> None:
    (tmp_path / "there").mkdir()
    key_path, pub_path = save_key(SigningKey.generate(), tmp_path / "there" / ".." / "made", "me")
    assert key_path.is_file() and pub_path.is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["made", "there"]
