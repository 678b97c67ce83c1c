"""`grant issue` and `grant delegate` write the token to `--out`, replacing what is there. Until
review R68 only the token file delegated from was refused there: `--out` naming, by any path, the
policy or the audience's public key file the command had just read replaced it with the token
(exit 0), so `grant issue --policy support.yaml ... --out support.yaml` lost the policy."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path

import pytest
from _cli import cli
from test_cli_approval import Setup

from agentgate.store import SQLiteStore

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Path:
    """The quickstart's directory: support.yaml, its four keys, a store."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "st.db"))
    shutil.copy(ROOT / "policies" / "support.yaml", tmp_path / "support.yaml")
    for name in ("ops-root", "support-agent", "alice", "bob"):
        assert cli(capsys, "keys", "new", name, "--dir", "keys")[0] == 0
    assert cli(capsys, "store", "init")[0] == 0
    return tmp_path


def _grants(here: Path) -> int:
    with contextlib.closing(SQLiteStore(here / "st.db")) as store:
        return int(store.query("SELECT COUNT(*) FROM agentgate_grants")[0][0])


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str], what: str) -> None:
    code, out, err = cli(capsys, *argv)
    assert (code, out) == (2, ""), (code, out, err)
    assert err.count("\n") == 1 and err.startswith("agentgate: error: "), err
    assert f"cannot write: it is {what}" in err and "name another file" in err, err


def test_issue_refuses_an_out_that_is_its_policy(here: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review R68: `--out` naming the `--policy` file (here by another path) replaced the
    policy with the token, exit 0; it is exit 2, the policy kept, no grant recorded."""
    policy = (here / "support.yaml").read_bytes()
    role = ["--policy", "support.yaml", "--role", "support-agent"]
    issue = ["grant", "issue", "--issuer", "keys/ops-root.key", "--to", "keys/support-agent.pub", *role]
    _refused(capsys, [*issue, "--out", "keys/../support.yaml"], "the policy file")
    assert (here / "support.yaml").read_bytes() == policy
    assert _grants(here) == 0
    assert cli(capsys, *issue, "--out", "agent.tok")[0] == 0  # another file will do


def test_issue_and_delegate_refuse_an_out_that_is_the_audiences_key(
    here: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R68: `--out` naming the `--to` public key file replaced the audience's key with
    the token, exit 0 (and the next command reading it failed, `neither a did:key nor a PEM
    public key`); it is exit 2, the key kept, nothing recorded."""
    pub = (here / "keys" / "bob.pub").read_bytes()
    issue = ["grant", "issue", "--issuer", "keys/ops-root.key", "--allow", "tool:x", "--ttl", "1h"]
    _refused(capsys, [*issue, "--to", "keys/bob.pub", "--out", "./keys/bob.pub"], "the --to key file")
    assert (here / "keys" / "bob.pub").read_bytes() == pub
    assert _grants(here) == 0
    assert cli(capsys, *issue, "--to", "keys/bob.pub", "--out", "bob.tok")[0] == 0
    delegate = ["grant", "delegate", "bob.tok", "--as", "keys/bob.key", "--allow", "tool:x", "--ttl", "5m"]
    alice = (here / "keys" / "alice.pub").read_bytes()
    _refused(capsys, [*delegate, "--to", "keys/alice.pub", "--out", "keys/alice.pub"], "the --to key file")
    assert (here / "keys" / "alice.pub").read_bytes() == alice
    assert _grants(here) == 1


@pytest.mark.usefixtures("no_default_store")
def test_approval_sign_refuses_an_out_that_is_its_payload(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R68: `approval sign payload.json --out payload.json` replaced the request the
    approver was shown (and a second approver of a quorum would sign from) with the approval,
    exit 0; it is exit 2, the payload kept."""
    made = Setup(tmp_path)
    try:
        payload = made.payload_file(made.ask())
        before = payload.read_bytes()
        sign = ["approval", "sign", str(payload), "--as", str(tmp_path / "k" / "lead.key")]
        _refused(capsys, [*sign, "--out", str(tmp_path / "." / "payload.json")], "the PAYLOAD file")
        assert payload.read_bytes() == before
        assert cli(capsys, *sign, "--out", str(tmp_path / "approval.json"))[0] == 0
    finally:
        made.gate.close()
