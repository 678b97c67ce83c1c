"""``save_key`` (``agentgate keys new --dir x/y/z``) makes each missing directory 0700, whatever
the umask, and a refusal leaves none of them behind (review R89). Until then ``mkdir -p`` gave the
parents the umask's mode (0777 under umask 000), the pair was then refused because of the very
directories the command had made ("x/y (mode 0777): group or others may rename files in it"),
and x, x/y and x/y/z were left on disk."""

from __future__ import annotations

from pathlib import Path

import pytest
from _cli import cli
from test_store_r89_umask_parents import _modes, loose_umask  # noqa: F401 (the fixture)

from agentgate.errors import KeyFileError
from agentgate.keys import SigningKey, load_signing_key, save_key


def test_missing_parents_are_made_private_and_the_pair_written(
    tmp_path: Path,
    loose_umask: None,  # noqa: F811 (the fixture)
) -> None:
    key = SigningKey.generate()
    key_path, _ = save_key(key, tmp_path / "x" / "y" / "z", "a")
    assert _modes(tmp_path, directories_only=True) == {"x": 0o700, "x/y": 0o700, "x/y/z": 0o700}
    assert load_signing_key(key_path).did == key.did


def test_keys_new_under_a_loose_umask_writes_the_pair(
    tmp_path: Path,
    loose_umask: None,  # noqa: F811 (the fixture)
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = cli(capsys, "keys", "new", "a", "--dir", str(tmp_path / "x" / "y" / "z"))
    assert (code, err) == (0, "")
    assert out.startswith("did:key:")
    assert _modes(tmp_path, directories_only=True) == {"x": 0o700, "x/y": 0o700, "x/y/z": 0o700}


def test_a_refusal_after_making_directories_leaves_none_of_them(
    tmp_path: Path,
    loose_umask: None,  # noqa: F811 (the fixture)
) -> None:
    """The pair cannot be written (``NAME.key`` is too long a file name): the directories made
    for it are removed again, and an existing one is left as it was."""
    (tmp_path / "there").mkdir()
    (tmp_path / "there").chmod(0o700)
    with pytest.raises(KeyFileError, match="cannot write the key pair"):
        save_key(SigningKey.generate(), tmp_path / "there" / "x" / "y", "a" * 252)
    assert [p.name for p in tmp_path.rglob("*")] == ["there"]


def test_a_directory_that_cannot_be_made_takes_back_those_made_above_it(
    tmp_path: Path,
    loose_umask: None,  # noqa: F811 (the fixture)
) -> None:
    """``x`` and ``x/y`` are made before ``x/y/AAA...`` fails (a name too long): both go again."""
    with pytest.raises(KeyFileError, match="cannot create the key directory: File name too long"):
        save_key(SigningKey.generate(), tmp_path / "x" / "y" / ("a" * 300), "a")
    assert list(tmp_path.iterdir()) == []
