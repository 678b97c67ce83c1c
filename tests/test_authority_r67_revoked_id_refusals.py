"""What ``revoke`` (and ``Gate.revoke``) says of a value that names no grant (review R67).

A grant id copied with a line break (``open(path).read()``), in upper case (a tool that shows
hashes so) or with a space around it, and a value that is no text at all, were refused as if they
were malformed chain tokens: ``not an agentgate token: it does not start with 'ag1'``, or ``a token
is a string``, naming neither what was given nor what a revocation takes. Each is now refused
(``TokenFormatError``, nothing written) saying what was wrong and that a grant id is 64 lower-case
hex digits; a value that starts as a token does is still refused by the token parser's own words.

Real components: a SQLite grant store, the team's Gate."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_langgraph import _make_team

from agentgate.authority import GrantRepository, issue, revoke
from agentgate.capabilities import Call
from agentgate.errors import TokenFormatError
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore

ROOT, AGENT = SigningKey.generate(), SigningKey.generate()
GRANT_ID = issue(ROOT, AGENT.public, ["tool:pay"], ttl=60).id


@pytest.fixture
def repo(tmp_path: Path) -> Iterator[GrantRepository]:
    store = SQLiteStore(tmp_path / "r.db")
    try:
        yield GrantRepository(store)
    finally:
        store.close()


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (GRANT_ID + "\n", "grant id with a line break or space around it"),
        (" " + GRANT_ID, "grant id with a line break or space around it"),
        (GRANT_ID.upper(), "a grant id is 64 lower-case hex digits"),
        (GRANT_ID[:63], "neither a chain token nor a grant id"),
        ("", "neither a chain token nor a grant id"),
    ],
    ids=["line-break", "space", "upper-case", "short", "empty"],
)
def test_a_mangled_grant_id_is_refused_saying_what_a_grant_id_is(
    repo: GrantRepository, given: str, said: str
) -> None:
    """Review R67: refused as a token that does not start with 'ag1', naming no grant id."""
    with pytest.raises(TokenFormatError) as refused:
        revoke(repo, given)
    assert said in str(refused.value)
    assert "64 lower-case hex digits" in str(refused.value)
    assert repo.store.query("SELECT COUNT(*) FROM agentgate_revocations")[0][0] == 0


@pytest.mark.parametrize("given", [None, 42, GRANT_ID.encode()], ids=["none", "int", "bytes"])
def test_a_value_that_is_no_text_is_refused_naming_its_type(repo: GrantRepository, given: object) -> None:
    """Review R67: refused as 'a token is a string', not saying what a revocation takes."""
    with pytest.raises(TokenFormatError) as refused:
        revoke(repo, given)  # type: ignore[arg-type]
    message = str(refused.value)
    assert type(given).__name__ in message
    assert "a Chain, a chain token or a 64-hex grant id" in message


def test_a_token_still_gets_the_parsers_own_refusal(repo: GrantRepository) -> None:
    """Review R67: what starts as a token is refused by the token parser, as before."""
    with pytest.raises(TokenFormatError, match="ag1"):
        revoke(repo, "ag1.not-a-token")


def test_gate_revoke_says_the_same_and_writes_nothing(tmp_path: Path) -> None:
    """Review R67: ``Gate.revoke`` of an upper-case grant id said 'does not start with ag1'."""
    team = _make_team(tmp_path)
    try:
        with pytest.raises(TokenFormatError, match="a grant id is 64 lower-case hex digits"):
            team.gate.revoke(team.supervisor.grant_id.upper())
        assert team.gate.grants.store.query("SELECT COUNT(*) FROM agentgate_revocations")[0][0] == 0
        assert team.gate.authorize(team.supervisor, Call.tool("search", {"query": "q"})).allowed
    finally:
        team.gate.close()
