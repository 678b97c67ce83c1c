"""Revocation by holder finds every recorded grant whose token names the holder, whatever its row's
``audience`` column says.

Review R69 found that ``revoke_holder`` (``agentgate grant revoke --holder``,
``Gate.revoke_holder``) found rows by their ``audience`` column only: a row of the holder's grant
written ahead of its record under another audience (as the application role may insert one) was
missed, and the compromised key's grant stayed live though the operator was told every recorded
grant was revoked. What holds now, on SQLite and PostgreSQL:

- every row is read once, outside the store's write lock (``scan_holder``), and a row whose token
  proves the holder's grant (its tip's hash is the row's id, its audience the holder) is revoked
  whatever its column says, with one audit entry, and reported (``mislabeled``, a ``warning:``);
- the rows found are read again, by id, in the revoking transaction and revoked only if their
  token still proves it (a row removed or replaced since is left);
- the cost is bounded: each row of another audience is read once by the scan and its token parsed
  only where its tip names the key, and the revoking transaction parses only the holder's rows and
  the rows the scan found.
"""

from __future__ import annotations

import json

import pytest
from test_authority_r68_holder_rows import _plant
from test_authority_revoke_holder import CAP, KEYS, cli, recorded, repo, revocations, url

from agentgate.authority import GrantRepository, delegate, issue
from agentgate.authority._revocation import revoke_holder, scan_holder
from agentgate.errors import InputError

__all__ = ["repo", "url"]  # the fixtures, imported for their use here


def test_a_grant_of_the_holder_recorded_under_another_audience_is_revoked_and_reported(
    repo: GrantRepository,
) -> None:
    """Review R69: ``revoke_holder(A)`` missed A's grant whose row names another audience (planted
    ahead of its record): A's compromised grant stayed live."""
    agent, other = KEYS["agent"], KEYS["other"]
    hidden = issue(KEYS["root"], agent.public, CAP, ttl=600)
    _plant(repo, hidden, other.did, hidden.token)
    own = recorded(repo, issue(KEYS["root"], agent.public, CAP, ttl=600))

    done = revoke_holder(repo, agent.did, reason="leaked")

    assert done.revoked == tuple(sorted((own.id, hidden.id)))
    assert done.mislabeled == (hidden.id,)
    assert revocations(repo.store) == {own.id, hidden.id}
    again = revoke_holder(repo, agent.did)
    assert (again.revoked, again.already, again.mislabeled) == (
        (),
        tuple(sorted((own.id, hidden.id))),
        (hidden.id,),
    )
    assert revoke_holder(repo, other.did).untrusted == (hidden.id,)  # not other's: its token says so


def test_the_command_revokes_audits_and_names_the_mislabeled_row(
    repo: GrantRepository, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R69: ``grant revoke --holder A`` neither revoked nor named A's grant recorded under
    another audience; now it revokes it with its audit entry and warns of the row."""
    agent, other = KEYS["agent"], KEYS["other"]
    hidden = issue(KEYS["root"], agent.public, CAP, ttl=600)
    _plant(repo, hidden, other.did, hidden.token)

    rc, out, err = cli(capsys, "grant", "revoke", "--holder", agent.did, "--by", "ops", "--json")
    assert (rc, err) == (0, ""), err
    shown = json.loads(out)
    assert shown["revoked"] == [hidden.id] and shown["mislabeled"] == [hidden.id]
    rc, out, err = cli(capsys, "audit", "show", "--kind", "revoke", "--json")
    assert [json.loads(line)["chain_hash"] for line in out.splitlines()] == [hidden.id]

    rc, out, err = cli(capsys, "grant", "revoke", "--holder", agent.did)
    assert rc == 0 and out.splitlines()[0] == f"revoked 0 grant(s) held by {agent.did}"
    assert err == (
        f"agentgate: warning: 1 recorded row(s) hold a grant of {agent.did} by their token but name another "
        f"holder (a row written by hand, not by agentgate): revoked as the key's: {hidden.id}\n"
    )


def test_a_row_removed_or_replaced_after_the_scan_is_not_revoked(repo: GrantRepository) -> None:
    """Review R69: the rows the scan finds are read again in the revoking transaction; one that
    no longer proves the holder's grant is left (the scan's word is not taken for a later state)."""
    agent, other = KEYS["agent"], KEYS["other"]
    gone = issue(KEYS["root"], agent.public, CAP, ttl=600)
    swapped = issue(KEYS["root"], agent.public, CAP, ttl=600)
    _plant(repo, gone, other.did, gone.token)
    _plant(repo, swapped, other.did, swapped.token)
    scan = scan_holder(repo, agent.did)
    assert scan.elsewhere == tuple(sorted((gone.id, swapped.id)))
    with repo.store.transaction() as tx:
        tx.execute("DELETE FROM agentgate_grants WHERE id = ?", (gone.id,))
        tx.execute("UPDATE agentgate_grants SET token = ? WHERE id = ?", ("edited", swapped.id))

    done = revoke_holder(repo, agent.did, scan=scan)

    assert (done.revoked, done.already, done.mislabeled) == ((), (), ())
    assert revocations(repo.store) == set()


def test_each_row_is_parsed_once_by_the_scan_and_the_lock_parses_only_the_holders(
    repo: GrantRepository,
) -> None:
    """Review R69: finding the mislabeled rows reads the whole table, but once and outside the
    write lock: the scan reads each row of another audience once (none of the holder's, which the
    revoking transaction checks) and parses only the tokens whose tip names the key, and the revoking transaction parses the holder's rows and the
    rows the scan found, no other (no work per pair of rows)."""
    agent, other = KEYS["agent"], KEYS["other"]
    mine = [recorded(repo, issue(KEYS["root"], agent.public, CAP, ttl=600)) for _ in range(3)]
    hidden = [issue(KEYS["root"], agent.public, CAP, ttl=600) for _ in range(2)]
    for chain in hidden:
        _plant(repo, chain, other.did, chain.token)
    for _ in range(30):
        recorded(repo, issue(KEYS["root"], other.public, CAP, ttl=600))

    scan = scan_holder(repo, agent.did)
    assert scan.read == 32  # the 30 of other's rows and the 2 planted ones, each once
    assert scan.parsed == 2  # only the tokens whose tip names the key are parsed
    assert scan.elsewhere == tuple(sorted(c.id for c in hidden))
    checked: list[str] = []

    def holds(token: object, grant_id: str) -> bool:
        checked.append(grant_id)
        return True

    revoked, already, untrusted = repo.revoke_holder(agent.did, now=1, holds=holds, also=scan.elsewhere)
    assert sorted(checked) == revoked == sorted(c.id for c in [*mine, *hidden])
    assert (already, untrusted) == ([], [])


def test_the_scan_reads_the_tip_of_a_delegated_chain_not_an_earlier_link(repo: GrantRepository) -> None:
    """Review R69: a delegated grant of the key (the key the tip's audience) recorded under another
    audience is found; one the key delegated onward (the key an earlier link's audience only) is
    another key's grant and is left to its own holder (revoked through its parent, if recorded)."""
    agent, other = KEYS["agent"], KEYS["other"]
    to_agent = delegate(issue(KEYS["root"], other.public, CAP, ttl=600), other, agent.public, CAP, ttl=300)
    onward = delegate(issue(KEYS["root"], agent.public, CAP, ttl=600), agent, other.public, CAP, ttl=300)
    _plant(repo, to_agent, KEYS["evil"].did, to_agent.token)
    _plant(repo, onward, KEYS["evil"].did, onward.token)

    done = revoke_holder(repo, agent.did)

    assert (done.revoked, done.mislabeled) == ((to_agent.id,), (to_agent.id,))
    assert revoke_holder(repo, other.did).mislabeled == (onward.id,)


def test_a_scan_of_another_holder_is_refused_and_nothing_is_revoked(repo: GrantRepository) -> None:
    """Review R69: ``revoke_holder``'s new ``scan`` argument names its holder; one read for another
    key (whose ids are that key's grants) is an ``InputError``, nothing written."""
    agent, other = KEYS["agent"], KEYS["other"]
    hidden = issue(KEYS["root"], other.public, CAP, ttl=600)
    _plant(repo, hidden, agent.did, hidden.token)
    recorded(repo, issue(KEYS["root"], agent.public, CAP, ttl=600))
    with pytest.raises(
        InputError, match=rf"scan is scan_holder's for {other.did}, not for {agent.did}, the holder revoked"
    ):
        revoke_holder(repo, agent.did, scan=scan_holder(repo, other.did))
    with pytest.raises(InputError, match=r"scan must be a HolderScan \(scan_holder's\), got str"):
        revoke_holder(repo, agent.did, scan="not a scan")  # type: ignore[arg-type]
    assert revocations(repo.store) == set()
