"""Review R86: ``audit accept-repair --help`` said ``--by`` is "recorded as the audit entry's
principal" and ``--reason`` "one line of text for the audit entry", but accepting a repair writes
no audit entry: a row of ``audit_repairs`` (who, when, why), which ``audit verify`` prints. Rule:
the help says where both are recorded, and names no audit entry."""

from __future__ import annotations

import pytest

from agentgate.cli.main import main


def test_accept_repair_help_says_what_is_written(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ended:
        main(["audit", "accept-repair", "--help"])
    assert ended.value.code == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "the audit entry" not in shown
    assert (
        "who checked the repair, recorded with the acceptance in audit_repairs (no audit entry is written)"
        in shown
    )
    assert (
        "how it was checked, one line of text recorded with the acceptance (audit verify prints both)"
        in shown
    )
