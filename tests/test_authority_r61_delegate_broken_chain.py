"""Review R61: ``delegate`` extends only a chain that holds together. A chain whose links are each
well formed but do not connect (a link signed by a key the parent was not given to), whose first
link names a parent, or whose signature does not verify is refused with the finding a verifier
would refuse it with, before anything is signed: until review R61 it was extended, and
``agentgate grant delegate`` exited 0 and recorded the forged link in the store as a grant."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from _raw_sqlite import opened

from agentgate.authority import Chain, delegate, issue, parse_chain
from agentgate.authority._encoding import canonical_json
from agentgate.authority._grant import GRANT_CONTEXT, _encode_chain
from agentgate.authority._parsing import parse_grant
from agentgate.cli.main import main
from agentgate.errors import Denied, InvalidSignature
from agentgate.keys import SigningKey, save_key


def _disconnected(root: SigningKey, alice: SigningKey, mallory: SigningKey, holder: SigningKey) -> Chain:
    """Root to alice, then a link to ``holder`` naming alice's grant as its parent but signed by
    ``mallory``, to whom nothing was given: each link well formed and validly signed."""
    granted = issue(root, alice.public, ["tool:x"], ttl=600)
    body = json.loads(delegate(granted, alice, holder.public, ["tool:x"], ttl=60).tip.payload)
    body["iss"] = mallory.did
    payload = canonical_json(body)
    forged = parse_grant(payload, mallory.sign(GRANT_CONTEXT + payload))
    return parse_chain(_encode_chain([*granted.links, forged]))


def test_a_chain_whose_audiences_do_not_connect_is_not_extended() -> None:
    """Review R61: the holder of a link signed by a key the parent was not given to could extend it."""
    root, alice, mallory, holder = (SigningKey.generate() for _ in range(4))
    chain = _disconnected(root, alice, mallory, holder)
    with pytest.raises(Denied) as refused:
        delegate(chain, holder, SigningKey.generate().public, ["tool:x"], ttl=30)
    assert refused.value.finding is not None
    assert refused.value.finding.code == "issuer_not_parent_audience"  # type: ignore[attr-defined]


def test_a_chain_whose_first_link_names_a_parent_is_not_extended() -> None:
    """Review R61: a chain whose first link was dropped (its first link names a parent) was extended."""
    root, alice, bob = (SigningKey.generate() for _ in range(3))
    chain = delegate(issue(root, alice.public, ["tool:x"], ttl=600), alice, bob.public, ["tool:x"], ttl=60)
    dropped = parse_chain(_encode_chain([chain.links[1]]))
    with pytest.raises(Denied) as refused:
        delegate(dropped, bob, SigningKey.generate().public, ["tool:x"], ttl=30)
    assert refused.value.finding.code == "root_has_parent"  # type: ignore[union-attr]


def test_a_chain_with_a_forged_signature_is_not_extended() -> None:
    """Review R61: a chain whose root's signature does not verify was extended."""
    root, alice = SigningKey.generate(), SigningKey.generate()
    parts = issue(root, alice.public, ["tool:x"], ttl=600).token.split(".")
    signature = bytearray(base64.urlsafe_b64decode(parts[2] + "=="))
    signature[0] ^= 1
    parts[2] = base64.urlsafe_b64encode(bytes(signature)).decode().rstrip("=")
    with pytest.raises(InvalidSignature) as refused:
        delegate(".".join(parts), alice, SigningKey.generate().public, ["tool:x"], ttl=30)
    assert refused.value.finding.code == "bad_signature"  # type: ignore[union-attr]


def test_grant_delegate_of_a_disconnected_chain_exits_1_and_records_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R61: ``grant delegate`` of such a chain exited 0, wrote the child's token and recorded
    the forged link as a grant; it now exits 1 with the finding, nothing written."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "store.db"))
    assert main(["store", "init"]) == 0
    root, alice, mallory, holder, carol = (SigningKey.generate() for _ in range(5))
    save_key(holder, tmp_path / "k", "holder")
    Path("bad.tok").write_text(_disconnected(root, alice, mallory, holder).token)
    capsys.readouterr()
    code = main(["grant", "delegate", "bad.tok", "--as", "k/holder.key", "--to", carol.did,
                 "--allow", "tool:x", "--ttl", "30s", "--out", "child.tok"])  # fmt: skip
    out, err = capsys.readouterr()
    assert err.startswith("deny: authority_chain_opacity issuer_not_parent_audience [issuer]: ")
    assert (code, out) == (1, "") and not Path("child.tok").exists()
    with opened(tmp_path / "store.db") as db:
        assert db.execute("SELECT count(*) FROM agentgate_grants").fetchone() == (0,)
