"""What ``agentgate policy lint`` and ``policy explain`` print when the policy or the command line
holds hostile names (review R61): line breaks, escape sequences and bidi controls in argument
names, constraint values, the principal, the tool and the file name never reach the terminal
raw, never add a line, and a name that is no plain identifier is quoted, so that its bounds show."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentgate._shown import not_printable
from agentgate.cli.main import main
from agentgate.policy import lint, parse_policy

HOSTILE = "a\\e[2Jb\\nc\\u202ed\\u2028e\\x85f\\u200bg\\rh\\u2066i\\x07"
"""As a YAML double-quoted text: ESC, LF, RLO, LS, NEL, ZWSP, CR, LRI and BEL between letters."""

POLICY = f"""\
version: 1
principals:
  alice: {{kind: human, did: did:key:z6MkqQP5oTUxZ95rgbJg29FwyrJ5N8HrRPpEBQbPrAUCkPXm, roles: [clerk]}}
tools:
  pay.x:
    args: {{"{HOSTILE}": {{type: string}}, amount: {{type: integer}}}}
    loggable: ["{HOSTILE}", "z\\e[31m"]
roles:
  clerk:
    ttl_s: 60
    capabilities:
      - resource: tool:pay.x
        constraints: {{amount: {{in: [1, "{HOSTILE}"]}}}}
      - resource: tool:pay.*
        constraints: {{amount: {{prefix: "{HOSTILE}"}}}}
approvals:
  g:
    resource: tool:pay.x
    when: {{"{HOSTILE}": {{eq: "{HOSTILE}"}}, "other\\u202e": {{prefix: "{HOSTILE}"}}}}
    approvers: [alice]
"""


def _raw(text: str) -> list[str]:
    """The characters of ``text`` that a terminal would act on (a line break aside)."""
    return [f"U+{ord(c):04X}" for c in text if not_printable(c) and c != "\n"]


def test_lint_prints_each_finding_on_its_own_two_lines_with_nothing_raw(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R61: a policy whose argument names and values hold ESC, LF, RLO, LS, NEL, ZWSP, CR,
    LRI and BEL, in a file whose name holds them too, prints no such character raw, and exactly
    two lines per finding and one summary line: the policy cannot forge or erase a line."""
    path = tmp_path / "q\x1b[2J\n\u202e.yaml"
    path.write_text(POLICY)
    findings = lint(parse_policy(POLICY))
    assert main(["policy", "lint", str(path)]) == 1
    out, err = capsys.readouterr()
    assert _raw(out + err) == []
    assert len(out.splitlines()) == 2 * len(findings) + 1
    assert out.splitlines()[-1].startswith(f"{tmp_path}/q\\x1b[2J\\n\\u202e.yaml: ")


def test_explain_prints_nothing_raw_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R61: ``policy explain`` with ESC, LF and RLO in ``--as``, in ``--tool`` and in the
    keys and values of ``--args`` prints none of them raw, in text and in ``--json``."""
    path = tmp_path / "p.yaml"
    path.write_text(POLICY)
    hostile_args = '{"amount": 1, "a\\u001b[2Jb\\nc\\u202ed": "x\\u2028y"}'
    for argv in (
        ["--as", "alice", "--tool", "pay.x", "--args", hostile_args],
        ["--as", "alice", "--tool", "pay.x", "--args", '{"amount": "a\\u001b[2J\\n\\u202e"}'],
        ["--as", "al\x1b[2Jice\n\u202e", "--tool", "pay.x"],
        ["--as", "alice", "--tool", "pay\x1b[2J.x\n\u202e"],
    ):
        for json_flag in ([], ["--json"]):
            main(["policy", "explain", str(path), *argv, *json_flag])
            out, err = capsys.readouterr()
            assert _raw(out + err) == [], argv


def test_a_gate_on_an_undeclared_argument_quotes_a_name_that_is_no_identifier() -> None:
    """Review R61: ``gate_on_undeclared_argument`` wrote the names a gate's ``when`` looks at bare,
    so a name holding ``, `` or a bidi control read as several names or as other words
    (``looks at other, which tool:pay.x does not declare``). A name that is no plain
    identifier is now quoted (``'other\\u202e'``); a plain one stays as written."""
    (finding,) = [f for f in lint(parse_policy(POLICY)) if f.code == "gate_on_undeclared_argument"]
    assert finding.message == "approval gate g looks at 'other\\u202e', which tool:pay.x does not declare"
    plain = POLICY.replace('"other\\u202e"', "note")
    (finding,) = [f for f in lint(parse_policy(plain)) if f.code == "gate_on_undeclared_argument"]
    assert finding.message == "approval gate g looks at note, which tool:pay.x does not declare"


def test_a_gate_condition_of_the_wrong_type_quotes_an_argument_name_that_is_no_identifier() -> None:
    """Review R61: ``constraint_type_mismatch`` on a gate's ``when`` wrote the argument name bare
    too; a name holding a space or a bidi control is quoted now."""
    text = POLICY.replace(f'"{HOSTILE}": {{eq: "{HOSTILE}"}}', f'"{HOSTILE}": {{gt: 1}}')
    (finding,) = [
        f
        for f in lint(parse_policy(text))
        if f.code == "constraint_type_mismatch" and "approval gate" in f.message
    ]
    assert finding.message.startswith("approval gate g: 'a\\x1b[2Jb\\nc\\u202ed")
    assert _raw(finding.message) == []


def test_a_rule_label_writes_an_unprintable_constraint_value_as_a_json_escape() -> None:
    """Review R61: a constraint value holding RLO, LS or NEL was written raw in the rule's label
    (JSON escapes only C0 controls), which every decision's reasons, every lint message and
    ``explain`` quote, to callers that do not escape what they print. Now each unprintable
    character is its JSON escape: the same JSON value, read back exactly, and nothing raw."""
    policy = parse_policy(POLICY)
    label = policy.rules["clerk"][1].label
    assert _raw(label) == []
    written = label.split("starts with ", 1)[1].removesuffix(" (line 14)")
    assert json.loads(written) == "a\x1b[2Jb\nc\u202ed\u2028e\x85f\u200bg\rh\u2066i\x07"
    assert all(_raw(f.message) == [] for f in lint(policy))
