"""``grant inspect`` and ``grant check`` --help name --trust as docs/cli.md does (review R92)."""

from __future__ import annotations

import pytest
from _cli import cli


@pytest.mark.parametrize(
    ("verb", "usage"),
    [
        ("inspect", "[--trust PUBFILE|DID]"),
        ("check", "--trust PUBFILE|DID"),
    ],
)
def test_help_names_trust_as_a_key_file_or_a_did(
    capsys: pytest.CaptureFixture[str], verb: str, usage: str
) -> None:
    """Review R92: --help showed --trust PUBFILE, while docs/cli.md's synopsis (and the verbs)
    take a public key file or a did:key, PUBFILE|DID."""
    code, out, _ = cli(capsys, "grant", verb, "--help")
    assert code == 0
    assert usage in " ".join(out.split("\n\n")[0].split())
