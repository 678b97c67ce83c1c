"""``save_key`` (``agentgate keys new NAME``) refuses a name that starts or ends with white space
(review R89): ``keys new 'alice.key '`` got past the ``.key`` suffix check and wrote
``alice.key .key`` and ``alice.key .pub``, and ``'alice '`` wrote ``alice .key``, names that
look like others in a listing and that no page names."""

from __future__ import annotations

from pathlib import Path

import pytest
from _cli import cli

from agentgate.errors import KeyFileError
from agentgate.keys import SigningKey, save_key


@pytest.mark.parametrize("name", ["alice ", " alice", "alice.key ", "alice\u00a0", "\u3000alice"])
def test_a_name_starting_or_ending_with_white_space_is_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(KeyFileError, match="starts or ends with white space; leave it out"):
        save_key(SigningKey.generate(), tmp_path / "keys", name)
    assert list(tmp_path.iterdir()) == []


def test_keys_new_of_a_name_with_a_trailing_space_writes_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = cli(capsys, "keys", "new", "alice.key ", "--dir", str(tmp_path))
    assert (code, out) == (2, "")
    assert err == (
        "agentgate: error: invalid key name 'alice.key ': it starts or ends with white space; leave it out\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_space_inside_a_name_is_still_taken(tmp_path: Path) -> None:
    key_path, pub_path = save_key(SigningKey.generate(), tmp_path, "alice smith")
    assert (key_path.name, pub_path.name) == ("alice smith.key", "alice smith.pub")
