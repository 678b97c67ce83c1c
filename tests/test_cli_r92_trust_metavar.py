"""``grant check`` --help names --trust as docs/cli.md does (review R92); ``grant inspect``'s
usage line is pinned whole by test_cli_startup_imports."""

from __future__ import annotations

import pytest
from _cli import cli


def test_check_help_names_trust_as_a_key_file_or_a_did(capsys: pytest.CaptureFixture[str]) -> None:
    """Review R92: --help showed --trust PUBFILE, while docs/cli.md's synopsis (and the verb)
    take a public key file or a did:key, PUBFILE|DID."""
    code, out, _ = cli(capsys, "grant", "check", "--help")
    assert code == 0
    assert "--trust PUBFILE|DID" in " ".join(out.split("\n\n")[0].split())
