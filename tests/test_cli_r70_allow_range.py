"""A whole number too large for a token, written with an exponent in `--allow`, is refused naming
the flag and the value, as every refused `--allow` is (docs/cli.md, CAP): review R70's second
reading of `_integers_only`."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.cli.main import main
from agentgate.keys import SigningKey, save_key


@pytest.mark.parametrize(
    "allow", ["tool:payments.refund?amount<=1e30", "tool:payments.refund?amount=1|-1e19"]
)
def test_an_integral_number_out_of_a_tokens_range_is_refused_naming_the_flag(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], allow: str
) -> None:
    """Review R70: `--allow 'tool:payments.refund?amount<=1e30'` passed the flag's checks (the
    float is whole, so `_integers_only` let it by) and `issue` refused it while encoding the
    token, as `grant caps[0]: tool:payments.refund amount: integer 1000000000000000019884624838656
    is out of range (|v| < 2**63)`: naming neither `--allow` nor the value given, and quoting a
    number the user never wrote (`99999999999999999999` written out was refused naming both)."""
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "agentgate.db"))
    issuer, _ = save_key(SigningKey.generate(), tmp_path / "k", "root")
    _, holder_pub = save_key(SigningKey.generate(), tmp_path / "k", "agent")
    out = tmp_path / "t.tok"
    argv = ["grant", "issue", "--issuer", str(issuer), "--to", str(holder_pub), "--out", str(out)]
    capsys.readouterr()
    assert main([*argv, "--allow", allow, "--ttl", "30m"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert captured.err.startswith(f"agentgate: error: --allow {allow!r}: argument 'amount': ")
    assert "out of range for a token (|v| < 2**63)" in captured.err
    assert not out.exists()
