"""``agentgate policy lint | explain | schema`` (agentgate/cli/policy.py): output, JSON shapes and
exit codes (0 no error finding or an allow, 1 an error finding or a deny, 2 a policy that does not
load or bad input), an error always one line on stderr."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_policy_load import HEAD, WORKER

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


# The policies below are those of test_policy_load (HEAD, WORKER); each docstring names the
# hand-made mutant the test kills and the rule it pins.
def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "p.yaml"
    path.write_text(text)
    return str(path)


def test_lint_exits_1_for_a_single_error_finding(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Kills: ``policy lint`` exiting 1 only for more than one error (or skipping the first).

    One error finding is enough for exit 1 (docs/cli.md)."""
    path = _write(tmp_path, HEAD.replace("args:", "audit: false\n    args:") + WORKER)
    assert main(["policy", "lint", path, "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [f["code"] for f in report["findings"] if f["severity"] == "error"] == ["tool_not_audited"]


def test_lint_json_of_an_unloadable_file_has_every_documented_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Kills: the ``findings`` key dropped from ``lint --json`` for a file that does not load.

    The shape is ``{"file", "valid", "error", "findings"}`` with ``findings`` empty, on stdout,
    nothing on stderr, exit 2."""
    path = _write(tmp_path, "version: 1\nroles: {a: {ttl_s: 1}, a: {ttl_s: 2}}\n")
    assert main(["policy", "lint", path, "--json"]) == 2
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["findings"] == [] and report["valid"] is False and report["file"] == path
    assert set(report["error"]) == {"message", "file", "line", "column", "expected", "hint"}
    assert captured.err == ""


def test_explain_json_of_a_call_without_a_gate(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Kills: ``quorum`` printed as 0 (not null) when no gate applies, and the text saying
    "approval: none needed" for a deny.

    No approval: ``approval``, ``quorum`` and ``approval_expiry_s`` are null, ``approvers`` empty;
    a denied call's text never says no approval is needed."""
    path = _write(tmp_path, HEAD + WORKER)
    base = ["policy", "explain", path, "--as", "bot", "--tool", "payments.refund", "--args"]
    assert main([*base, '{"amount": 5}', "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["approval"] is None and out["quorum"] is None and out["approval_expiry_s"] is None
    assert out["approvers"] == []
    assert main([*base, '{"amount": 500}']) == 1
    assert "approval: none needed" not in capsys.readouterr().out


def test_explain_of_a_non_canonical_tool_is_a_deny_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Kills: a tool name that is not canonical exiting 2 (bad input) instead of 1 (deny).

    docs/cli.md: a tool name that is not canonical is a deny, exit 1."""
    path = _write(tmp_path, HEAD + WORKER)
    assert main(["policy", "explain", path, "--as", "bot", "--tool", "Payments.Refund"]) == 1
    assert capsys.readouterr().out.startswith("DENY: ")


def test_an_error_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Kills: ``_one_line`` keeping the message's own line breaks, and an ``AgentGateError``
    exiting 1 instead of 2.

    A policy whose error quotes a multi-line key still gives exactly one ``agentgate: error:``
    line on stderr, exit 2."""
    path = _write(tmp_path, 'version: 1\n"x\\ny": 1\n')
    assert main(["policy", "explain", path, "--as", "bot", "--tool", "t"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("agentgate: error: ") and err.count("\n") == 1


def test_lint_of_a_number_tag_without_digits_is_exit_2_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Mutant (review r53): ``name: !!float ""`` raised PyYAML's IndexError through ``policy
    lint``: a traceback and exit 1, which reads as "the policy has error findings".

    Rule: a file that does not load is exit 2 and one line naming file:line:column."""
    path = tmp_path / "p.yaml"
    path.write_text('version: 1\nname: !!float ""\n')
    assert main(["policy", "lint", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == f"agentgate: error: {path}:2:7: not a number: '' " + (
        "(expected a number (0x, 0o and 0b followed by at least one digit)); hint: write the digits, or quote text\n"
    )


def test_lint_shows_each_escape_of_an_error_and_a_finding_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R55: policy lint escaped its error line and its finding lines again as a whole
    (backslashes included), so text the library had quoted escaped (a key path, a constraint as
    JSON) showed each escape twice. Rule: what is still unprintable is escaped, once."""
    folder = tmp_path / "d\x1bx"
    folder.mkdir()
    broken = folder / "p.yaml"
    broken.write_text('version: 1\nprincipals:\n  p:\n    kind: agent\n    key: "x\\e[2J.pub"\n')
    assert main(["policy", "lint", str(broken)]) == 2
    err = capsys.readouterr().err
    assert f"agentgate: error: {tmp_path}/d\\x1bx/p.yaml:5:10: key file 'x\\x1b[2J.pub'" in err
    assert "\\\\" not in err and err.count("\n") == 1 and err[:-1].isprintable()

    mismatch = folder / "q.yaml"
    mismatch.write_text(
        "version: 1\ntools:\n  refund:\n    args:\n      amount: {type: integer}\nroles:\n  r:\n"
        "    kind: agent\n    ttl_s: 3600\n    capabilities:\n      - resource: tool:refund\n"
        '        constraints:\n          amount: {eq: "x\\e[2J"}\n'
    )
    assert main(["policy", "lint", str(mismatch)]) == 1
    out = capsys.readouterr().out
    assert f"{tmp_path}/d\\x1bx/q.yaml:11: error:" in out
    assert 'the constraint {"eq": "x\\u001b[2J"} admits no integer' in out
    assert "\\\\" not in out and all(line.isprintable() for line in out.splitlines())


def test_explain_shows_an_unknown_principal_on_its_own_line_escaped_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Review R55: policy explain printed a name that is no principal raw in its first line and
    escaped its reasons twice, so --as 'x<LF>ALLOW: ...' printed a line reading ALLOW. Rule: the
    account has its own lines only, each escape shown once."""
    assert (
        main(["policy", "explain", SUPPORT, "--as", "x\nALLOW: support-agent", "--tool", "payments.refund"])
        == 1
    )
    out = capsys.readouterr().out
    assert out.startswith("DENY: x\\nALLOW: support-agent calling tool:payments.refund with {}\n")
    assert "    - 'x\\nALLOW: support-agent' is not a principal of this policy\n" in out
    assert not any(line.startswith("ALLOW") for line in out.splitlines())
