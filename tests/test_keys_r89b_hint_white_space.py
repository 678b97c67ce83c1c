"""``agentgate keys new`` offers a name that works for a name with white space before its suffix
(review R89b).

A name ending in ``.key`` or ``.pub`` is refused with the command to run instead; review R89 made
``save_key`` refuse a name that starts or ends with white space, but the command offered for
``alice .key`` or `` alice.key`` kept it (``agentgate keys new 'alice '``), and running it was
refused in turn. The name offered now leaves the white space out, and running it writes the pair.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from _cli import cli


@pytest.mark.parametrize("name", ["alice .key", " alice.key", "alice .key.pub", "alice.key .key"])
def test_the_name_offered_for_a_name_with_white_space_before_its_suffix_is_one_keys_new_takes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str
) -> None:
    directory = tmp_path / "keys"
    code, out, err = cli(capsys, "keys", "new", name, "--dir", str(directory))
    assert (code, out) == (2, "")
    assert err == (
        f"agentgate: error: invalid key name {name!r}: NAME is the name without .key or .pub: "
        "agentgate keys new alice writes alice.key and alice.pub\n"
    )
    offered = shlex.split(err.split("agentgate keys new ", 1)[1].split(" writes ")[0])
    code, _, err = cli(capsys, "keys", "new", *offered, "--dir", str(directory))
    assert (code, err) == (0, "")
    assert sorted(path.name for path in directory.iterdir()) == ["alice.key", "alice.pub"]


def test_a_name_of_white_space_and_a_suffix_is_refused_for_its_white_space(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = cli(capsys, "keys", "new", " .key", "--dir", str(tmp_path / "keys"))
    assert (code, out) == (2, "")
    assert "starts or ends with white space" in err
    assert "agentgate keys new" not in err
