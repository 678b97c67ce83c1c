"""A policy without a `version` key, or with another version, said so in words: a defect found by
review R70 following docs/policy-reference.md as a new user, failing before its fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.cli.main import main
from agentgate.errors import PolicyError
from agentgate.policy import parse_policy


def test_a_policy_without_a_version_is_said_to_have_none_not_version_none() -> None:
    """Review R70: a file with no `version` key was refused as `unsupported or missing policy version None`.

    `None` is Python's word for the key being absent, which the file's author never wrote: the
    error now says the file has no `version` and how to add it, at line 1."""
    with pytest.raises(PolicyError) as caught:
        parse_policy("name: support\n", source="p.yaml")
    error = caught.value
    assert error.message == "missing policy version: the file has no 'version' key"
    assert "None" not in str(error)
    assert (error.line, error.column) == (1, 1)
    assert error.hint == "add 'version: 1' at the top of the file"


def test_another_version_is_named_and_the_hint_does_not_ask_to_add_what_is_there() -> None:
    """Review R70: `version: 2` was told to "add 'version: 1' at the top of the file", where a version already is.

    The message still names the version written (existing scripts match its words); the hint now
    says which version this agentgate reads."""
    with pytest.raises(PolicyError) as caught:
        parse_policy("version: 2\nname: support\n", source="p.yaml")
    error = caught.value
    assert error.message.startswith("unsupported or missing policy version 2")
    assert (error.line, error.column) == (1, 10)
    assert error.hint == "write 'version: 1': this agentgate reads version 1 policies only"


def test_lint_prints_the_missing_version_on_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R70: `agentgate policy lint` of a file without `version` printed `... version None ...`."""
    policy = tmp_path / "p.yaml"
    policy.write_text("name: support\n", encoding="utf-8")
    assert main(["policy", "lint", str(policy)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "p.yaml:1:1: missing policy version: the file has no 'version' key" in err
    assert "None" not in err
