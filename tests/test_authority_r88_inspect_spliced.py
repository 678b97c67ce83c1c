"""``agentgate grant inspect`` marks a link revoked through a link above it only where it descends
from that link (review R88).

A revocation takes the grants below the revoked one, and a grant is below another only through
the parent it names. Until R88 inspect passed a revocation down by position in the token: a link
spliced in from another, live chain behind a revoked root was shown ``revoked through [0] ROOT...``
and its JSON named that root in ``"revoked_through"``, though the grant holds on its own chain.
Now a link that does not name the link above as its parent (``parent_mismatch``) inherits no
revocation from it; the chain still exits 1 for its finding.

Real components: the CLI in-process on a SQLite store (test_cli_grant's ``env``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cli_grant import REFUND, cli
from test_cli_r61_inspect_exit_codes import chain, inspect_both

from agentgate.authority import delegate, issue
from agentgate.keys import SigningKey, load_signing_key

pytest_plugins = ("test_cli_grant",)  # its ``env`` fixture (three keys, a store in tmp_path)


def test_a_spliced_link_is_not_revoked_through_a_root_it_does_not_descend_from(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R88: y's live link behind x's revoked root was shown revoked through that root."""
    chain(capsys, "x")
    chain(capsys, "y")
    assert cli(capsys, "grant", "revoke", "x-a.tok")[0] == 0
    x, y = (Path(f"{n}-b.tok").read_text().split(".") for n in ("x", "y"))
    Path("spliced.tok").write_text(".".join(x[:3] + y[3:]))
    code, out, json_code, shown = inspect_both(capsys, "spliced.tok")
    links = shown["links"]
    assert isinstance(links, list)
    root, tip = links
    assert (root["revoked"], root["revoked_through"]) == (True, None)
    assert (tip["revoked"], tip["revoked_through"]) == (False, None)
    assert [finding["code"] for finding in tip["findings"]] == ["parent_mismatch"]
    assert "revoked through" not in out
    assert (code, json_code) == (1, 1)


def test_below_a_spliced_link_revocation_follows_the_parents(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R88: the link below a spliced one descends from it, not from the revoked root above
    the splice; a revoked spliced link still takes the link below it."""
    root, alice, bob = (load_signing_key(Path(f"k/{name}.key")) for name in ("root", "alice", "bob"))
    revoked_root = issue(root, alice.public, [REFUND], ttl=3600, max_depth=2)
    live_root = issue(root, alice.public, [REFUND], ttl=3600, max_depth=2)
    middle = delegate(live_root, alice, bob.public, [REFUND], ttl=600)
    tip = delegate(middle, bob, SigningKey.generate().public, [REFUND], ttl=300)
    parts = revoked_root.token.split(".")[:3] + tip.token.split(".")[3:]
    Path("spliced.tok").write_text(".".join(parts))
    assert cli(capsys, "store", "init")[0] == 0
    assert cli(capsys, "grant", "revoke", revoked_root.id)[0] == 0
    _, out, _, shown = inspect_both(capsys, "spliced.tok")
    links = shown["links"]
    assert isinstance(links, list)
    assert [link["id"] for link in links] == [revoked_root.id, middle.id, tip.id]
    assert [link["revoked_through"] for link in links] == [None, None, None]
    assert cli(capsys, "grant", "revoke", middle.id)[0] == 0
    _, out, _, shown = inspect_both(capsys, "spliced.tok")
    links = shown["links"]
    assert isinstance(links, list)
    assert [(link["revoked"], link["revoked_through"]) for link in links] == [
        (True, None),
        (True, None),
        (False, middle.id),
    ]
    assert f"└─ [2] {tip.id}  [revoked through [1] {middle.id[:16]}...]" in out
