"""Review R85: ``agentgate grant revoke ID`` lists the recorded descendants of the grant it
revoked, ids read from ``agentgate_grants`` rows. A row is the word of whoever may insert into
the table, and until R85 its id was written raw: one holding an escape sequence and a line
break reached the terminal and printed a forged line. Now the ids are escaped as ``grant revoke
--holder`` escapes the ids it names (``printable``)."""

from __future__ import annotations

import pytest
from test_authority_revoke_holder import CAP, KEYS, cli, recorded, repo, url

from agentgate.authority import GrantRepository, issue

__all__ = ["repo", "url"]  # the fixtures, imported for their use here

PLANTED = "x\x1b[31mRED\nrevoked 0000 (forged line)"


def test_a_planted_descendant_id_is_printed_escaped_on_one_line(
    repo: GrantRepository, capsys: pytest.CaptureFixture[str]
) -> None:
    grant = recorded(repo, issue(KEYS["root"], KEYS["agent"].public, CAP, ttl=600))
    with repo.store.transaction() as tx:
        tx.execute(
            "INSERT INTO agentgate_grants (id, parent, issuer, audience, expires, recorded_at, token) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (PLANTED, grant.id, "i", "a", 9_999_999_999, 0, "t"),
        )

    rc, out, err = cli(capsys, "grant", "revoke", grant.id, "--reason", "test")

    assert rc == 0, err
    assert "\x1b" not in out and "\nrevoked 0000" not in out, out
    assert out.splitlines() == [
        f"revoked {grant.id}",
        "1 recorded descendant grant(s) are dead with it: x\\x1b[31mRED\\nrevoked 0000 (forged line)",
    ]
