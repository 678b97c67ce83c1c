"""Review R61: ``agentgate grant inspect`` exit codes are a contract a script can act on.

Inspect is a reading verb, but ``grant inspect t.tok && deploy`` must not go ahead with a chain that
does not hold together: exit 0 when no link is marked, 1 when a link is (a finding, a signature
that does not verify, a revoked or expired link), 2 for input it cannot use. The tree (or the
JSON) is printed in every case but the last."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import pytest
from test_cli_grant import REFUND, cli

from agentgate.authority import issue
from agentgate.keys import load_signing_key

pytest_plugins = ("test_cli_grant",)  # its ``env`` fixture (three keys, a store in tmp_path)


def chain(capsys: pytest.CaptureFixture[str], name: str) -> None:
    """``NAME-a.tok`` (root to alice) and ``NAME-b.tok`` (alice to bob below it), recorded."""
    assert cli(capsys, "grant", "issue", "--issuer", "k/root.key", "--to", "k/alice.pub", "--allow", REFUND,
               "--ttl", "1h", "--out", f"{name}-a.tok")[0] == 0  # fmt: skip
    assert cli(capsys, "grant", "delegate", f"{name}-a.tok", "--as", "k/alice.key", "--to", "k/bob.pub",
               "--allow", "tool:payments.refund?amount<=100&currency=EUR", "--ttl", "10m",
               "--out", f"{name}-b.tok")[0] == 0  # fmt: skip


def inspect_both(capsys: pytest.CaptureFixture[str], token: str) -> tuple[int, str, int, dict[str, object]]:
    """The exit code and output of ``grant inspect`` of ``token``, as a tree and as JSON."""
    code, out, _ = cli(capsys, "grant", "inspect", token)
    json_code, shown, _ = cli(capsys, "grant", "inspect", token, "--json")
    return code, out, json_code, json.loads(shown)


def test_inspect_of_a_chain_that_holds_together_exits_0(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R61: a sound chain, every link's revocation read from the store, exits 0."""
    chain(capsys, "x")
    code, out, json_code, shown = inspect_both(capsys, "x-b.tok")
    assert (code, json_code) == (0, 0)
    assert "chain of 2 link(s)" in out and "  [" not in out and "     ! " not in out
    assert len(shown["links"]) == 2  # type: ignore[arg-type]


def test_inspect_of_a_spliced_chain_exits_1_with_the_finding(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R61: a chain spliced from two (docs/concepts.md, section 4) printed its
    ``authority_chain_opacity parent_mismatch`` finding and exited 0, so ``inspect && deploy``
    went ahead with a chain no verifier accepts."""
    chain(capsys, "x")
    chain(capsys, "y")
    x, y = (Path(f"{n}-b.tok").read_text().split(".") for n in ("x", "y"))
    Path("spliced.tok").write_text(".".join(x[:3] + y[3:]))
    code, out, json_code, shown = inspect_both(capsys, "spliced.tok")
    assert "! authority_chain_opacity parent_mismatch" in out
    assert shown["links"][1]["findings"][0]["code"] == "parent_mismatch"  # type: ignore[index]
    assert (code, json_code) == (1, 1)


def test_inspect_of_a_link_whose_signature_does_not_verify_exits_1(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R61: a link whose signature does not verify (the token's last byte of signature
    changed) is marked ``SIGNATURE INVALID`` and exits 1, where it exited 0."""
    chain(capsys, "x")
    parts = Path("x-b.tok").read_text().strip().split(".")
    signature = bytearray(base64.urlsafe_b64decode(parts[-1] + "=="))
    signature[0] ^= 1
    parts[-1] = base64.urlsafe_b64encode(bytes(signature)).decode().rstrip("=")
    Path("forged.tok").write_text(".".join(parts))
    code, out, json_code, shown = inspect_both(capsys, "forged.tok")
    assert "SIGNATURE INVALID" in out and shown["links"][1]["signature"] == "INVALID"  # type: ignore[index]
    assert (code, json_code) == (1, 1)


def test_inspect_of_a_revoked_chain_exits_1(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review R61: a chain with a link revoked in the store is marked ``REVOKED`` and exits 1."""
    chain(capsys, "x")
    assert cli(capsys, "grant", "revoke", "x-a.tok")[0] == 0
    code, out, json_code, _ = inspect_both(capsys, "x-b.tok")
    assert "REVOKED" in out and (code, json_code) == (1, 1)


def test_inspect_of_an_expired_chain_exits_1(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review R61: a chain with an expired link is marked ``EXPIRED`` and exits 1."""
    root, alice = load_signing_key(Path("k/root.key")), load_signing_key(Path("k/alice.key"))
    old = issue(root, alice.public, [REFUND], ttl=60, now=time.time() - 3600)
    Path("old.tok").write_text(old.token)
    code, out, json_code, shown = inspect_both(capsys, "old.tok")
    assert "EXPIRED" in out and shown["links"][0]["expired"] is True  # type: ignore[index]
    assert (code, json_code) == (1, 1)


def test_inspect_where_revocation_is_unknown_exits_0(
    env: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review R61: with no store to read revocation from, a chain otherwise sound is shown with
    ``revocation unknown`` and exits 0: inspect reads a token where no store is (docs/cli.md)."""
    chain(capsys, "x")
    monkeypatch.setenv("AGENTGATE_STORE", str(env / "nowhere.db"))
    code, out, json_code, _ = inspect_both(capsys, "x-b.tok")
    assert "revocation unknown (no store at AGENTGATE_STORE)" in out and (code, json_code) == (0, 0)


def test_inspect_of_a_file_that_is_no_token_exits_2(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review R61: a file that holds no token is exit 2, one error line, nothing on standard output."""
    Path("g.tok").write_text("garbage")
    code, out, err = cli(capsys, "grant", "inspect", "g.tok")
    assert code == 2 and out == "" and err.startswith("agentgate: error: ") and err.count("\n") == 1


def test_inspect_help_states_its_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    """Review R61: ``grant inspect --help`` says which exit code means what."""
    code, out, _ = cli(capsys, "grant", "inspect", "--help")
    shown = " ".join(out.split())
    assert code == 0
    assert "0 every link sound" in shown and "1 a link is marked" in shown and "2 unusable input" in shown
