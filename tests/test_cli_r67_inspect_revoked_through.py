"""``agentgate grant inspect`` marks the links below a revoked link as revoked through it
(review R67).

A revocation takes every grant below the revoked one with it (applied at decision time), and the
store records only the grant that was revoked. Until R67 inspect marked that one ``REVOKED`` and
showed every link below it unmarked, the holder's own grant included, as if it still held, and
its JSON said ``"revoked": false`` for it with nothing else: ``audit explain`` had said ``revoked
through grant ID...`` of such a link since review R55. Now the tree marks it ``revoked through
[i] ID...`` and the JSON gives ``"revoked_through"``: the id of the nearest revoked link above it
(``null`` where none is, or where revocation is unknown).

Real components: the CLI in-process on a SQLite store (test_cli_grant's ``env``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cli_grant import REFUND, cli
from test_cli_r61_inspect_exit_codes import chain, inspect_both

from agentgate.authority import delegate, issue
from agentgate.keys import SigningKey, load_signing_key

pytest_plugins = ("test_cli_grant",)  # its ``env`` fixture (three keys, a store in tmp_path)


def test_a_link_below_a_revoked_one_is_marked_revoked_through_it(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R67: the holder's grant below a revoked root was shown unmarked, ``"revoked": false``."""
    chain(capsys, "x")
    assert cli(capsys, "grant", "revoke", "x-a.tok")[0] == 0
    code, out, json_code, shown = inspect_both(capsys, "x-b.tok")
    links = shown["links"]
    assert isinstance(links, list)
    root, tip = links
    assert (root["revoked"], root["revoked_through"]) == (True, None)
    assert (tip["revoked"], tip["revoked_through"]) == (False, root["id"])
    lines = out.splitlines()
    assert lines[1].endswith("[REVOKED]")
    assert f"└─ [1] {tip['id']}  [revoked through [0] {root['id'][:16]}...]" in out
    assert (code, json_code) == (1, 1)


def test_a_revoked_tip_marks_nothing_above_it(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review R67: only links below a revoked one are revoked through it, never those above."""
    chain(capsys, "y")
    assert cli(capsys, "grant", "revoke", "y-b.tok")[0] == 0
    _, out, _, shown = inspect_both(capsys, "y-b.tok")
    links = shown["links"]
    assert isinstance(links, list)
    assert [(link["revoked"], link["revoked_through"]) for link in links] == [(False, None), (True, None)]
    assert "revoked through" not in out


def test_the_nearest_revoked_link_is_named(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review R67: with the root and the link below it both revoked, the grant below them is
    revoked through the nearer one, as ``audit explain`` names it."""
    root, alice, bob = (load_signing_key(Path(f"k/{name}.key")) for name in ("root", "alice", "bob"))
    first = issue(root, alice.public, [REFUND], ttl=3600, max_depth=2)
    second = delegate(first, alice, bob.public, [REFUND], ttl=600)
    third = delegate(second, bob, SigningKey.generate().public, [REFUND], ttl=300)
    Path("three.tok").write_text(third.token)
    assert cli(capsys, "store", "init")[0] == 0
    for grant in (first, second):
        assert cli(capsys, "grant", "revoke", grant.id)[0] == 0
    _, out, _, shown = inspect_both(capsys, "three.tok")
    links = shown["links"]
    assert isinstance(links, list)
    assert [link["revoked_through"] for link in links] == [None, first.id, second.id]
    assert f"[revoked through [1] {second.id[:16]}...]" in out
