"""``agentgate grant inspect`` marks a link revoked through the revoked grant it names as its
parent, wherever that grant stands above it in the token (review R88b).

A revocation takes the grants below the revoked one, through the parent each names. Review R88
stopped passing a revocation to a link spliced in from another chain, but did it by forgetting
the revocation whenever a link's parent was not the link just above: in a chain [R, B, C] where
C names the revoked R as its parent (a sibling of B, spliced in), C was shown not revoked,
``"revoked_through": null``, though it descends from R. Now the revocation is found by the parent's
id among the links above; a link whose parent is no link in the chain inherits none.

Real components: the CLI in-process on a SQLite store (test_cli_grant's ``env``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cli_grant import REFUND, cli
from test_cli_r61_inspect_exit_codes import inspect_both

from agentgate.authority import delegate, issue
from agentgate.keys import SigningKey, load_signing_key

pytest_plugins = ("test_cli_grant",)  # its ``env`` fixture (three keys, a store in tmp_path)


def test_a_link_whose_parent_is_a_revoked_grant_higher_up_is_revoked_through_it(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R88b: C, naming the revoked root two places above as its parent, was shown unmarked."""
    root, alice, bob = (load_signing_key(Path(f"k/{name}.key")) for name in ("root", "alice", "bob"))
    top = issue(root, alice.public, [REFUND], ttl=3600, max_depth=2)
    sibling = delegate(top, alice, bob.public, [REFUND], ttl=600)
    spliced = delegate(top, alice, SigningKey.generate().public, [REFUND], ttl=600)
    parts = sibling.token.split(".")[:6] + spliced.token.split(".")[3:6]
    Path("spliced.tok").write_text(".".join(parts))
    assert cli(capsys, "store", "init")[0] == 0
    assert cli(capsys, "grant", "revoke", top.id)[0] == 0
    code, out, json_code, shown = inspect_both(capsys, "spliced.tok")
    links = shown["links"]
    assert isinstance(links, list)
    assert [link["id"] for link in links] == [top.id, sibling.id, spliced.id]
    assert links[2]["parent"] == top.id
    assert [(link["revoked"], link["revoked_through"]) for link in links] == [
        (True, None),
        (False, top.id),
        (False, top.id),
    ]
    assert [finding["code"] for finding in links[2]["findings"]] == ["parent_mismatch"]
    assert f"└─ [2] {spliced.id}  [revoked through [0] {top.id[:16]}...]" in out
    assert (code, json_code) == (1, 1)
