"""``agentgate grant`` messages and marks of the four failure states (review R64), through the
real entry point: a delegation from a revoked parent, a revocation of an id the store never
recorded, and a chain whose root issuer is no trust anchor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _cli import cli

from agentgate.cli.main import main


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "store.db"))
    monkeypatch.chdir(tmp_path)
    for name in ("root", "alice", "bob", "mallory"):
        assert main(["keys", "new", name, "--dir", "k"]) == 0
    return tmp_path


ISSUE = ("grant", "issue", "--issuer", "k/root.key", "--to", "k/alice.pub", "--ttl", "1h")
DELEGATE = ("grant", "delegate", "a.tok", "--as", "k/alice.key", "--to", "k/bob.pub", "--ttl", "5m")


def test_delegating_from_a_revoked_parent_prints_the_librarys_finding_with_its_fix(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R64: ``grant delegate`` from a revoked parent printed a line built by hand ("grant
    ID in this chain is revoked"), with no fix; it is now the ``revoked`` finding the Gate gives."""
    assert cli(capsys, *ISSUE, "--allow", "tool:search.*", "--out", "a.tok")[0] == 0
    code, out, _ = cli(capsys, "grant", "revoke", "a.tok", "--json")
    assert code == 0
    (revoked,) = json.loads(out)["revoked"]
    code, out, err = cli(capsys, *DELEGATE, "--allow", "tool:search.web")
    assert (code, out) == (1, "") and err.count("\n") == 1
    assert err.startswith(f"deny: non_revocable_grant revoked: link 0 ({revoked[:16]}...) of this chain")
    assert err.endswith("every grant below a revoked grant is dead: ask for a new grant\n")


def test_revoking_an_id_the_store_never_recorded_says_so(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R64: ``grant revoke <64-hex id never recorded>`` printed ``revoked ID``, exit 0, as
    for a real grant: a mistyped id looked like a successful revocation. It is still revoked (a
    grant made offline is refused whenever presented), and a note on standard error and in
    ``--json`` says the store records no such grant."""
    assert cli(capsys, *ISSUE, "--allow", "tool:search.*", "--out", "a.tok")[0] == 0
    unknown = "ab" * 32
    code, out, err = cli(capsys, "grant", "revoke", unknown)
    assert (code, out) == (0, f"revoked {unknown}\n")
    assert err.startswith("note: no grant with this id is recorded in this store;")
    code, out, err = cli(capsys, "grant", "revoke", "cd" * 32, "--json")
    shown = json.loads(out)
    assert code == 0 and shown["revoked"] == ["cd" * 32] and shown["recorded"] is False
    assert shown["note"].startswith("no grant with this id is recorded in this store;")
    assert err == ""
    code, out, err = cli(capsys, "grant", "revoke", "a.tok", "--json")
    assert code == 0 and json.loads(out)["recorded"] is True and "note" not in json.loads(out)
    assert err == ""


def test_inspect_with_trust_marks_a_root_issued_by_no_trust_anchor(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R64: ``grant inspect`` of a chain issued by a key that is no trust anchor printed no
    mark and exited 0 (it took no ``--trust``). With ``--trust`` the root is marked
    ``untrusted_root`` (exit 1, as inspect's other marks); without, the output says the root was
    not checked against trust anchors."""
    forged = ("grant", "issue", "--issuer", "k/mallory.key", "--to", "k/alice.pub", "--ttl", "1h")
    assert cli(capsys, *forged, "--allow", "tool:search.*", "--out", "m.tok")[0] == 0
    assert cli(capsys, *ISSUE, "--allow", "tool:search.*", "--out", "a.tok")[0] == 0

    code, out, _ = cli(capsys, "grant", "inspect", "m.tok", "--trust", "k/root.pub")
    assert code == 1
    assert "! authority_chain_opacity untrusted_root: root grant issued by" in out
    assert "root issuer: NOT one of the trust anchors given with --trust" in out
    code, out, _ = cli(capsys, "grant", "inspect", "m.tok", "--trust", "k/root.pub", "--json")
    shown = json.loads(out)
    assert code == 1 and shown["root_trusted"] is False
    assert [f["code"] for f in shown["links"][0]["findings"]] == ["untrusted_root"]

    code, out, _ = cli(
        capsys, "grant", "inspect", "a.tok", "--trust", "k/mallory.pub", "--trust", "k/root.pub"
    )
    assert code == 0 and "root issuer: a trust anchor given with --trust" in out
    code, out, _ = cli(capsys, "grant", "inspect", "m.tok")
    assert code == 0 and "root issuer: not checked against trust anchors (give --trust" in out
    code, out, _ = cli(capsys, "grant", "inspect", "m.tok", "--json")
    assert code == 0 and json.loads(out)["root_trusted"] is None


def test_inspect_refuses_a_trust_that_is_no_public_key(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review R64: ``--trust`` is read as ``grant check`` reads it: no key, exit 2, one line."""
    assert cli(capsys, *ISSUE, "--allow", "tool:search.*", "--out", "a.tok")[0] == 0
    code, out, err = cli(capsys, "grant", "inspect", "a.tok", "--trust", "did:key:nonsense")
    assert code == 2 and out == "" and err.count("\n") == 1
