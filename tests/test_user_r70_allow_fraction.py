"""A fractional number in `--allow` refused naming the flag and the value, as docs/cli.md says of
every refused `--allow`: a defect found by review R70 checking docs/cli.md's claims against the
command, failing before its fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.cli.main import main
from agentgate.keys import SigningKey, save_key


@pytest.mark.parametrize(
    ("allow", "number"),
    [
        ("tool:payments.refund?amount<=500.5", "500.5"),
        ("tool:payments.refund?amount=1|2.5", "2.5"),
        ("tool:payments.refund?currency=EUR&amount>0.25", "0.25"),
    ],
)
@pytest.mark.parametrize("verb", ["issue", "delegate"])
def test_a_fraction_in_allow_is_refused_naming_the_flag_and_the_value(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    allow: str,
    number: str,
    verb: str,
) -> None:
    """Review R70: `--allow 'tool:payments.refund?amount<=500.5'` was refused as `tool:payments.refund
    amount: 500.5 is not an integer; ...`, naming neither `--allow` nor the value given.

    docs/cli.md: "The error line of a refused `--allow` names the flag and the value, cut at 60
    characters, then why"; every other refusal of the parser did. The number is now checked
    where the flag is read, before anything is signed or recorded, in `grant issue` and `grant
    delegate` alike, exit 2 with one line."""
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "agentgate.db"))
    issuer, _ = save_key(SigningKey.generate(), tmp_path / "k", "root")
    holder, holder_pub = save_key(SigningKey.generate(), tmp_path / "k", "agent")
    _, sub_pub = save_key(SigningKey.generate(), tmp_path / "k", "sub")
    if verb == "issue":
        argv = ["grant", "issue", "--issuer", str(issuer), "--to", str(holder_pub)]
    else:
        token = tmp_path / "root.tok"
        assert main(["store", "init"]) == 0
        assert main(["grant", "issue", "--issuer", str(issuer), "--to", str(holder_pub), "--allow", "tool:*",
                     "--ttl", "1h", "--out", str(token)]) == 0  # fmt: skip
        argv = ["grant", "delegate", str(token), "--as", str(holder), "--to", str(sub_pub)]
    capsys.readouterr()
    assert main([*argv, "--allow", allow, "--ttl", "30m"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert captured.err.startswith(f"agentgate: error: --allow {allow!r}: ")
    assert f"{number} is not an integer; tokens carry integers only (use minor units)" in captured.err
