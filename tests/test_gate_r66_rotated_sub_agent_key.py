"""A principal's replaced key that holds a grant delegated to it (review R66).

docs/operations.md ("Rotating keys") said that once the policy replaces a principal's key, "calls
under the old key ... are refused ... whether or not the store recorded those grants". That holds
for grants issued to the old key (and every grant below them): their chain's first holder is no
principal any more. It did not hold for a grant another principal *delegated* to the old key (the
key used as a sub-agent's): the Gate cannot tell a replaced principal key from a sub-agent's key
made at run time, so such a grant stays good until it expires or is revoked. The docs now say
so, and to revoke by holder; these tests pin both halves."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from test_langgraph import NAMES, _make_team, _policy_text

from agentgate.capabilities import Call
from agentgate.gate import Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

SEARCH = Call.tool("search", {"query": "q"})


def test_a_grant_delegated_to_a_replaced_key_stands_until_revoked_by_holder(tmp_path: Path) -> None:
    """Review R66: the researcher's key, delegated a grant by the supervisor as sub-agent "helper",
    still acts on it after the policy replaces the researcher's key (docs/operations.md said
    every call under the old key was refused); ``revoke_holder`` on the old key ends it."""
    team = _make_team(tmp_path)
    old = team.keys["researcher"]
    helper = team.gate.delegate(
        team.supervisor, name="helper", key=old, capabilities=["tool:search"], ttl=timedelta(minutes=5)
    )
    team.gate.close()
    dids = {name: team.keys[name].did for name in NAMES}
    dids["researcher"] = SigningKey.generate().did
    rotated = Gate(
        parse_policy(_policy_text(dids, 1_000_000), source="team.yaml"),
        SQLiteStore(tmp_path / "agentgate.db"),
    )
    try:
        assert rotated.authorize(helper, SEARCH, agent="helper").allowed
        assert rotated.revoke_holder(old.did, reason="key replaced").revoked == (helper.grant_id,)
        assert not rotated.authorize(helper, SEARCH, agent="helper").allowed
    finally:
        rotated.close()
