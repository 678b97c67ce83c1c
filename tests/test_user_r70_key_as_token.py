"""A key file given where a token file belongs is said to be a key: a defect found by review R70
following docs/cli.md as a new user (arguments swapped), failing before its fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.cli.main import main
from agentgate.keys import SigningKey, save_key


@pytest.mark.parametrize(
    ("which", "said"),
    [("key", "holds a PEM key, not a token"), ("pub", "holds a did:key (a public key), not a token")],
)
def test_a_key_file_given_as_the_token_file_is_named_as_a_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], which: str, said: str
) -> None:
    """Review R70: `agentgate grant inspect alice.key` said `holds more than one line; a token file
    holds one token on one line`, and `grant inspect alice.pub` `not an agentgate token: it does not
    start with 'ag1.'`: true, but not what is wrong (a key where the token belongs, as in `grant
    check alice.key --as child.tok`). Now the line says the file holds a key; the key itself is
    never quoted. Exit 2, one line."""
    private, public = save_key(SigningKey.generate(), tmp_path / "k", "alice")
    path = private if which == "key" else public
    assert main(["grant", "inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"alice.{which}: {said}" in err
    assert "PRIVATE KEY-----" not in err and "z6Mk" not in err
