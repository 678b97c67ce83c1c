"""``Gate.revoke_holder`` reaches a grant of the key whose row names another audience.

Review R69 found that a row written ahead of a grant's record under another audience (as the
application role may insert one) hid the grant from ``Gate.revoke_holder``: the Gate's allow, which
records every link of the chain it allows, met the planted row and left it, and the leaked key
went on acting after its holder was revoked. What holds now: the grant is revoked, with its
``revoke`` audit entry, reported in ``mislabeled``, and the key's next call is refused.
"""

from __future__ import annotations

from test_gate_r67_offline_chains_recorded import SEARCH, _offline
from test_langgraph import Team
from test_langgraph import team as team  # the fixture

from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore


def test_a_grant_recorded_under_another_audience_is_revoked_by_its_holder(team: Team) -> None:
    """Review R69: ``Gate.revoke_holder(key)`` missed the key's grant whose row was planted under
    another audience ahead of the allow that records it; the key went on acting."""
    key, other = SigningKey.generate(), SigningKey.generate()
    helper = _offline(team, key)
    tip = helper.chain.links[-1]
    with SQLiteStore(team.path / "agentgate.db") as store, store.transaction() as tx:
        tx.execute(
            "INSERT INTO agentgate_grants (id, parent, issuer, audience, expires, token, recorded_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (tip.id, tip.parent, tip.issuer, other.did, tip.expires, helper.chain.token, 1),
        )
    assert team.gate.authorize(helper, SEARCH).allowed

    done = team.gate.revoke_holder(key.did, by="ops", reason="leaked")

    assert (done.revoked, done.mislabeled) == ((helper.grant_id,), (helper.grant_id,))
    refused = team.gate.authorize(helper, SEARCH)
    assert [f.code for f in refused.findings] == ["revoked"]
