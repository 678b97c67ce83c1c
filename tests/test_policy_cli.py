"""``agentgate policy lint | explain | schema``: output and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentgate.cli.main import main
from agentgate.policy import json_schema_text

POLICIES = Path(__file__).resolve().parents[1] / "policies"
SUPPORT = str(POLICIES / "support.yaml")
CORPUS = Path(__file__).parent / "corpus"


def test_lint_clean_file_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policy", "lint", SUPPORT]) == 0
    assert "0 error(s), 0 warning(s)" in capsys.readouterr().out


def test_lint_warnings_only_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policy", "lint", str(CORPUS / "033-tool-without-rule" / "policy.yaml")]) == 0
    out = capsys.readouterr().out
    assert "warning: authority_chain_opacity/tool_without_rule" in out and "fix:" in out


def test_lint_error_finding_exits_1_and_json_lists_it(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(CORPUS / "021-delegation-wider-than-role" / "policy.yaml")
    assert main(["policy", "lint", path, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    (finding,) = report["findings"]
    assert finding["kind"] == "scope_creep" and finding["code"] == "delegation_wider_than_role"
    assert finding["file"] == path and finding["line"] > 0 and finding["hint"]


def test_lint_invalid_file_exits_2_with_location(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(CORPUS / "050-duplicate-key" / "policy.yaml")
    assert main(["policy", "lint", path]) == 2
    err = capsys.readouterr().err
    assert f"{path}:5:5: duplicate key" in err and "Traceback" not in err
    assert main(["policy", "lint", path, "--json"]) == 2
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] is False and report["error"]["line"] == 5


def test_explain_exit_codes_follow_the_decision(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["policy", "explain", SUPPORT, "--as", "support-agent", "--tool", "payments.refund", "--args"]
    assert main([*base, '{"order_id": "o", "amount": 80, "currency": "EUR"}']) == 0
    assert "ALLOW" in capsys.readouterr().out
    assert main([*base, '{"order_id": "o", "amount": 800, "currency": "EUR"}']) == 3
    out = capsys.readouterr().out
    assert "APPROVAL REQUIRED" in out and "large-refund" in out and "quota agent-refunds-per-hour" in out
    assert main([*base, '{"order_id": "o", "amount": 8000, "currency": "EUR"}']) == 1
    assert "anything not explicitly allowed is denied" in capsys.readouterr().out
    assert main([*base, "not json"]) == 2
    assert "not JSON" in capsys.readouterr().err
    # A duplicate key would let a reviewer read 80 while JSON keeps 8000: refused, as `grant check` does.
    assert main([*base, '{"order_id": "o", "amount": 80, "amount": 8000, "currency": "EUR"}']) == 2
    assert "duplicate key 'amount'" in capsys.readouterr().err
    assert main([*base, '{"order_id": "o", "amount": NaN, "currency": "EUR"}']) == 2


def test_explain_json_and_non_canonical_tool(capsys: pytest.CaptureFixture[str]) -> None:
    cmd = [
        "policy",
        "explain",
        SUPPORT,
        "--as",
        "support-agent",
        "--tool",
        "tickets.read",
        "--args",
        '{"ticket_id": "T"}',
    ]
    assert main([*cmd, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["decision"] == "allow"
    assert main(["policy", "explain", SUPPORT, "--as", "support-agent", "--tool", "Tickets.Read"]) == 1


def test_schema_prints_the_committed_schema(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["policy", "schema"]) == 0
    assert capsys.readouterr().out == json_schema_text()
    assert main(["policy", "schema", "-o", str(tmp_path / "s.json")]) == 0
    assert (tmp_path / "s.json").read_text() == (POLICIES / "policy.schema.json").read_text()


def test_explain_unknown_principal_is_a_deny(capsys: pytest.CaptureFixture[str]) -> None:
    cmd = [
        "policy",
        "explain",
        SUPPORT,
        "--as",
        "mallory",
        "--tool",
        "tickets.read",
        "--args",
        '{"ticket_id": "T"}',
    ]
    assert main(cmd) == 1
    assert "'mallory' is not a principal of this policy" in capsys.readouterr().out


def test_explain_invalid_policy_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(CORPUS / "055-empty-file" / "policy.yaml")
    assert main(["policy", "explain", path, "--as", "bot", "--tool", "x"]) == 2
    assert "the policy file is empty" in capsys.readouterr().err
