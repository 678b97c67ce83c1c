"""``agentgate keys new`` refuses a name ending in ``.key`` or ``.pub`` in any case (review R88).

``keys new alice.key`` is refused (review R67: it wrote ``alice.key.key``), but the check was of
small letters only: ``keys new alice.KEY`` wrote ``alice.KEY.key`` and ``alice.KEY.pub``, which
no page names (and, where file names are not told apart by case, ``alice.key.key``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _cli import cli


@pytest.mark.parametrize(
    ("name", "stem"), [("alice.KEY", "alice"), ("alice.Pub", "alice"), ("alice.Key.KEY", "alice")]
)
def test_keys_new_of_a_name_with_the_key_files_suffix_in_capitals_says_to_leave_it_out(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, stem: str
) -> None:
    code, out, err = cli(capsys, "keys", "new", name, "--dir", str(tmp_path / "keys"))
    assert (code, out) == (2, "")
    assert err == (
        f"agentgate: error: invalid key name {name!r}: NAME is the name without .key or .pub: "
        f"agentgate keys new {stem} writes {stem}.key and {stem}.pub\n"
    )
    assert not (tmp_path / "keys").exists() or list((tmp_path / "keys").iterdir()) == []
