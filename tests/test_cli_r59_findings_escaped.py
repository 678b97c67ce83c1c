"""``grant check`` and ``grant delegate`` print the findings and reasons of a deny escaped.

The library quotes the text a caller or a token gave (``repr``, a capability's percent-encoding),
so no input reaches these lines raw today; the command does not rely on it: whatever a finding
holds, a terminal shows it as one line with no escape sequence (docs/cli.md, grant check).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from test_cli_grant import CHECK_AS_BOB, cli, env, issue_and_delegate

import agentgate.cli.grant as grant_cli
from agentgate.errors import ScopeCreep
from agentgate.findings import Finding, FindingKind

__all__ = ["env"]  # the fixture, imported for the tests below

HOSTILE = "x\x1b[2J\u202e\nallow: FAKE"
SHOWN = "x\\x1b[2J\\u202e\\nallow: FAKE"
FINDING = Finding(
    kind=FindingKind.SCOPE_CREEP, code="call_not_covered", message=HOSTILE, field=f"constraints.{HOSTILE}"
)


def test_grant_check_escapes_a_hostile_finding_and_reason(
    env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R59: grant check printed a finding's message, field and reason raw (escape, bidi, line break)."""
    issue_and_delegate(capsys)
    decide = grant_cli.decide

    def hostile(*args: object, **kwargs: object) -> object:
        decision = decide(*args, **kwargs)  # type: ignore[arg-type]
        return dataclasses.replace(decision, reasons=(HOSTILE,), findings=(FINDING,))

    monkeypatch.setattr(grant_cli, "decide", hostile)
    code, out, _ = cli(
        capsys, *CHECK_AS_BOB, "payments.refund", "--args", '{"amount": 5000, "currency": "EUR"}'
    )
    assert code == 1
    assert out == (f"deny: {SHOWN}\n  scope_creep call_not_covered [constraints.{SHOWN}]: {SHOWN}\n")
    code, out, _ = cli(capsys, *CHECK_AS_BOB, "payments.refund", "--args", '{"amount": 5000}', "--json")
    decision = json.loads(out)  # JSON stays exact JSON: the text as it was
    assert code == 1 and decision["reasons"] == [HOSTILE] and decision["findings"][0]["message"] == HOSTILE


def test_grant_delegate_escapes_a_hostile_finding(
    env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R59: grant delegate printed a refusal's finding (and a finding-less refusal) raw."""
    issue_and_delegate(capsys)
    argv = ("grant", "delegate", "b.tok", "--as", "k/bob.key", "--to", "k/alice.pub", "--allow", "tool:payments.refund", "--ttl", "1m")  # fmt: skip

    def refuse(finding: Finding | None) -> None:
        def delegate(*args: object, **kwargs: object) -> object:
            exc = ScopeCreep(HOSTILE)
            exc.finding = finding
            raise exc

        monkeypatch.setattr(grant_cli, "delegate", delegate)

    refuse(FINDING)
    code, out, err = cli(capsys, *argv)
    assert (code, out) == (1, "")
    assert err == f"deny: scope_creep call_not_covered [constraints.{SHOWN}]: {SHOWN}\n"
    refuse(None)
    code, out, err = cli(capsys, *argv)
    assert (code, out, err) == (1, "", f"deny: {SHOWN}\n")
