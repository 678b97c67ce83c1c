"""Review R83, second look: with the one-line form's limit raised to 57,344 characters, a number
of more digits than Python reads (4,300) fits in it: ``parse_capability`` refuses it with
``CapabilityError`` naming its length, as it refuses every other value it cannot read, instead
of the bare ``ValueError`` from ``int()`` (a traceback out of ``grant issue --allow``, exit 1,
and out of ``policy lint``). A refusal quotes at most 200 characters of the line."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.capabilities import parse_capability
from agentgate.cli.main import main
from agentgate.errors import CapabilityError

DIGITS = "1" * 4400


@pytest.mark.parametrize(
    "text", [f"tool:pay?amount<={DIGITS}", f"tool:pay?amount<=-{DIGITS}", f"tool:pay?a=1|{DIGITS}"]
)
def test_a_number_past_4300_digits_is_a_capability_error(text: str) -> None:
    with pytest.raises(
        CapabilityError, match="an integer of 4400 digits is more than can be read"
    ) as refused:
        parse_capability(text)
    assert len(str(refused.value)) < 500


def test_grant_issue_refuses_it_on_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["keys", "new", "k", "--dir", "."]) == 0 and main(["keys", "new", "a", "--dir", "."]) == 0
    capsys.readouterr()
    argv = ["grant", "issue", "--issuer", "k.key", "--to", "a.pub", "--allow", f"tool:pay?amount<={DIGITS}"]
    code = main([*argv, "--ttl", "1h"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and "Traceback" not in err
    assert "an integer of 4400 digits" in err.splitlines()[-1], err
