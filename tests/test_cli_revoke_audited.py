"""``agentgate grant revoke`` leaves a ``revoke`` entry in the audit log, as
``Gate.revoke`` does, in the same transaction as the revocation (docs/audit-format.md lists every
revocation among the entries; the command used to revoke in the store only)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_cli_grant import cli, env, issue_and_delegate  # noqa: F401 (env is a fixture)

CHECK = ["grant", "check", "b.tok", "--as", "k/bob.key", "--trust", "k/root.pub", "--tool", "payments.refund"]
ARGS = ["--args", '{"amount": 50, "currency": "EUR"}']


def _tip(capsys: pytest.CaptureFixture[str]) -> str:
    code, out, _ = cli(capsys, "grant", "inspect", "b.tok", "--json")
    assert code == 0
    return str(json.loads(out)["tip"])


def _revocations(capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    code, out, err = cli(capsys, "audit", "show", "--kind", "revoke", "--json")
    assert code == 0, err
    return [json.loads(line) for line in out.splitlines()]


def test_a_revocation_from_the_command_line_is_audited(env: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    issue_and_delegate(capsys)
    tip = _tip(capsys)
    code, out, err = cli(capsys, "grant", "revoke", tip, "--reason", "key leaked", "--by", "alice")
    assert code == 0 and out.startswith(f"revoked {tip}"), err
    (entry,) = _revocations(capsys)
    assert (entry["principal"], entry["chain_hash"], entry["reasons"]) == ("alice", tip, ["key leaked"])
    assert cli(capsys, *CHECK, *ARGS)[0] == 1
    code, out, _ = cli(capsys, "audit", "verify")
    assert code == 0 and out.startswith("intact")


def test_the_revoker_is_the_operator_unless_named(env: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    issue_and_delegate(capsys)
    assert cli(capsys, "grant", "revoke", "b.tok")[0] == 0
    (entry,) = _revocations(capsys)
    assert (entry["principal"], entry["reasons"]) == ("operator", [])


def test_without_the_log_key_nothing_is_revoked(env: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    issue_and_delegate(capsys)
    assert cli(capsys, *CHECK, *ARGS)[0] == 0
    assert cli(capsys, "audit", "checkpoint")[0] == 0  # a log signed by a key...
    (env / "log.key").rename(env / "elsewhere.key")  # ...that is not where agentgate looks
    code, out, err = cli(capsys, "grant", "revoke", "b.tok")
    assert code == 2 and out == "" and "no log key" in err and "Traceback" not in err
    assert cli(capsys, *CHECK, *ARGS)[0] == 0  # not revoked: no revocation without its entry
    (env / "elsewhere.key").rename(env / "log.key")
    assert _revocations(capsys) == []


def test_a_since_in_other_digits_is_refused(env: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    """docs/cli.md: anything but a prefix of the entry time format is exit 2 (the entries' times
    are ASCII digits, so full-width ones would silently select nothing)."""
    issue_and_delegate(capsys)
    assert cli(capsys, "grant", "revoke", "b.tok")[0] == 0  # a log to read
    code, out, err = cli(capsys, "audit", "show", "--since", "\uff12\uff10\uff12\uff16")
    assert code == 2 and out == "" and "time prefix" in err
    code, out, _ = cli(capsys, "audit", "show", "--since", "2026")
    assert code == 0 and "revoke" in out
