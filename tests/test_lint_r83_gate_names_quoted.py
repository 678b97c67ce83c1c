"""Review R83: ``contradictory_constraint`` (agentgate/policy/_lint/_constraints.py) writes the
argument names of a gate's ``when`` as every other message does (``_quoted``): a name that is no
plain identifier is quoted, each unprintable character escaped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentgate.cli.main import main
from agentgate.policy import lint, parse_policy

POLICY = """\
version: 1
principals:
  alice: {kind: human, did: did:key:z6Mkn6co2nAe6kgBR8cNPwkVv7k6U393ZCNwQcMtXk9mB1gj, roles: [r]}
tools:
  payments.refund:
    args: {NAME: {type: integer}, amount: {type: integer}, currency: {type: integer}}
roles:
  r:
    ttl_s: 600
    capabilities: [{resource: "tool:payments.refund", constraints: {amount: {gt: 5, lt: 1}}}]
approvals:
  big:
    resource: tool:payments.refund
    when: {NAME: {gt: 5, lt: 1}, currency: {gt: 5, lt: 1}}
    approvers: [alice]
"""


def _contradictions(name: str) -> list[str]:
    policy = parse_policy(POLICY.replace("NAME", name), source="p.yaml")
    return [f.message for f in lint(policy) if f.code == "contradictory_constraint"]


def test_a_gate_argument_holding_a_comma_reads_as_one_name() -> None:
    """Review R83: the names were joined bare, so a gate argument named ``amount, currency``
    read as two names: ``no value of amount, currency, currency satisfies its condition``."""
    assert _contradictions('"amount, currency"') == [
        "role r rule 1: tool:payments.refund where amount < 1 and amount > 5 (line 10): no value of "
        "amount satisfies it: it never matches",
        "approval gate big: no value of 'amount, currency', currency satisfies its condition",
    ]


def test_a_bidi_control_in_a_gate_argument_reaches_no_message_raw(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R83: U+202E (right-to-left override) in a gate argument's name reached the
    ``--json`` message as it is, reordering the words after it wherever it is shown. It is
    escaped now, in the message as in the text report."""
    assert _contradictions('"other\\u202e"')[1] == (
        "approval gate big: no value of currency, 'other\\u202e' satisfies its condition"
    )
    path = tmp_path / "p.yaml"
    path.write_text(POLICY.replace("NAME", '"other\\u202e"'))
    assert main(["policy", "lint", str(path), "--json"]) == 1
    out = capsys.readouterr().out
    messages = [f["message"] for f in json.loads(out)["findings"]]
    assert "approval gate big: no value of currency, 'other\\u202e' satisfies its condition" in messages
    assert not any("\u202e" in m for m in messages)
