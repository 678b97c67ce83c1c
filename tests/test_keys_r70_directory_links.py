"""A private key's directory chain is judged along the path the kernel actually walks
(docs/cli.md, Files): every directory in which a name is looked up, the link targets of a
chain of links included, not only the directories of the path as given and of the file it
reaches (review R69)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.errors import KeyFileError
from agentgate.keys import SigningKey, load_signing_key, save_key, unsafe_directory

KEY = SigningKey(bytes(range(32)))


def _chain(tmp_path: Path) -> tuple[Path, Path]:
    """``keys -> hop/a -> real``: a key in ``real``, reached through the link ``a`` that lives in
    ``hop``, which is neither on the path as given (``keys/root.key``) nor above the file's real
    directory. Returns the path as given and ``hop``."""
    save_key(KEY, tmp_path / "real", "root")
    hop = tmp_path / "hop"
    hop.mkdir()
    (hop / "a").symlink_to(tmp_path / "real")
    (tmp_path / "keys").symlink_to(hop / "a")
    return tmp_path / "keys" / "root.key", hop


def test_a_directory_holding_a_link_in_the_middle_of_a_chain_is_judged(tmp_path: Path) -> None:
    """Review R70: `hop`, where the middle link of `keys -> hop/a -> real` lies, was never
    judged: anyone who may write it can point `a` at a key of their own, and the key was used."""
    given, hop = _chain(tmp_path)
    assert unsafe_directory(given) is None
    hop.chmod(0o777)
    said = unsafe_directory(given)
    assert said is not None and said.startswith(f"{hop} (mode 0777): "), said
    with pytest.raises(KeyFileError, match=f"directory others may change: {hop} "):
        load_signing_key(given)


def test_a_relative_link_is_followed_from_the_directory_it_lies_in(tmp_path: Path) -> None:
    """A relative link target (`keys -> hop/a`, `a -> ../real`) is walked from the link's own
    directory, `..` included, so the same `hop` is found."""
    save_key(KEY, tmp_path / "real", "root")
    hop = tmp_path / "hop"
    hop.mkdir()
    (hop / "a").symlink_to("../real")
    (tmp_path / "keys").symlink_to("hop/a")
    given = tmp_path / "keys" / "root.key"
    assert load_signing_key(given).did == KEY.did
    hop.chmod(0o777)
    said = unsafe_directory(given)
    assert said is not None and said.startswith(f"{hop} (mode 0777): "), said


def test_a_link_loop_is_no_hang(tmp_path: Path) -> None:
    """A loop of links (`x -> y -> x`) ends the walk; the file cannot be read there anyway."""
    (tmp_path / "x").symlink_to(tmp_path / "y")
    (tmp_path / "y").symlink_to(tmp_path / "x")
    assert unsafe_directory(tmp_path / "x" / "root.key") is None
