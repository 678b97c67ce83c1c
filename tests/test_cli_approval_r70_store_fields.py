"""``agentgate approval sign --store``: a field the payload leaves out is checked as one it
changes (review R70, second reading)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from _cli import cli
from test_cli_approval_r70_store_check import Asked


@pytest.fixture
def asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Asked]:
    monkeypatch.delenv("AGENTGATE_STORE", raising=False)
    made = Asked(tmp_path)
    yield made
    made.gate.close()


def test_a_payload_without_its_requester_did_is_refused(
    asked: Asked, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R70: the store check compared a field only where the payload had it: a payload
    whose ``requester_did`` was removed on its way was signed, described as ``requester NAME
    (?)`` under a ``checked`` line that names the requester DID as checked. Left out is refused
    as changed is, exit 1, nothing signed."""
    code, out, err = cli(
        capsys, "approval", "sign", asked.write(lambda r: r.pop("requester_did")), "--as", asked.lead,
        "--store", str(asked.db),
    )  # fmt: skip
    assert (code, out) == (1, ""), err
    assert err.startswith("agentgate: refused: ") and "'requester_did'" in err, err


def test_the_requester_cannot_sign_its_own_request_by_hiding_its_did(
    asked: Asked, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R70: with the store read, the requester is known whatever the payload shows, yet
    the self-approval refusal read the payload's ``requester_did`` alone: the requester, its DID
    removed from the payload, got exit 0 and a signed approval the Gate refuses at resume."""
    agent_key = str(asked.path / "k" / "agent.key")
    code, out, err = cli(
        capsys, "approval", "sign", asked.write(lambda r: r.pop("requester_did")), "--as", agent_key,
        "--store", str(asked.db),
    )  # fmt: skip
    assert (code, out) == (1, ""), err
    assert err.startswith("agentgate: refused: ") and "must not be the requester" in err, err
