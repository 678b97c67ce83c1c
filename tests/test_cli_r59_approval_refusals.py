"""``agentgate approval sign``'s refusals (exit 1) name the PAYLOAD file, as its other lines do."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from test_cli_approval_hostile import request

from agentgate.cli.main import main
from agentgate.keys import SigningKey, save_key

PAST = 1_000_000_000  # 2001-09-09T01:46:40Z


@pytest.fixture
def signer(tmp_path: Path) -> tuple[Path, str]:
    """The approver's key file and its did."""
    key = SigningKey.generate()
    private, _ = save_key(key, tmp_path / "k", "lead")
    return private, key.did


@pytest.mark.parametrize("why", ["expired", "signer-is-requester", "call-hash-mismatch"])
def test_a_refusal_names_the_payload_file_and_the_request(
    signer: tuple[Path, str], tmp_path: Path, capsys: pytest.CaptureFixture[str], why: str
) -> None:
    """Review R59: a refusal named only the request (`request req-1 expired`), never the file read."""
    key, did = signer
    fields: dict[str, object] = {
        "expired": {"expires_at": PAST},
        "signer-is-requester": {"requester_did": did},
        "call-hash-mismatch": {"call_hash": "ab" * 32},
    }[why]
    payload = tmp_path / "refund.json"
    payload.write_text(request(**fields))
    assert main(["approval", "sign", str(payload), "--as", str(key)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert err.startswith(f"agentgate: refused: {payload}: request req-1: "), err


def test_a_refusal_of_standard_input_names_it_as_a_dash(
    signer: tuple[Path, str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R59: a refusal of a PAYLOAD read from standard input named no source; it is `-`."""
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(request(expires_at=PAST).encode())))
    assert main(["approval", "sign", "-", "--as", str(signer[0])]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == "agentgate: refused: -: request req-1: expired at 2001-09-09T01:46:40Z\n"
