"""A chain delegated outside the Gate is recorded in the grant store when the Gate allows a call
on it (review R67).

Until R67 only the grants the Gate made (``Gate.issue``, ``Gate.delegate``) and those
``agentgate grant issue/delegate`` made were recorded. A holder who delegated offline (the
library's ``delegate``, a token handed to a sub-agent) got calls allowed on a chain the store
never saw: ``agentgate audit explain`` of such an allow printed only the tip's hash ("the grant
store has no record of this chain": authority-chain opacity), ``revoke_holder`` of the sub-agent's
leaked key revoked nothing, and ``grant revoke ID`` said the id was never recorded. An allow now
records the chain's links (signed, verified grants) in the decision's transaction, once per
chain per Gate.

Real components: the team's Gate over a SQLite file, the CLI in-process."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest
from test_gateway_chain_cache import POLICY as GATEWAY_POLICY
from test_langgraph import NAMES, Team, _make_team, _policy_text
from test_langgraph import team as team  # the fixture

from agentgate.authority import Budget, Invocation, delegate, issue
from agentgate.capabilities import Call
from agentgate.cli.main import main
from agentgate.dispatch.gateway import GatewayGate
from agentgate.gate import AgentIdentity, Gate, _recording
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore, Store
from agentgate.store.grants import GrantRepository, GrantRow

SEARCH = Call.tool("search", {"query": "q"})


def _offline(team: Team, key: SigningKey) -> AgentIdentity:
    """A sub-agent whose grant the supervisor delegated with the library alone, never recorded."""
    chain = delegate(team.supervisor.chain, team.keys["supervisor"], key.did, ["tool:search"], ttl=300)
    return AgentIdentity("offline-helper", key, chain)


def _explain(team: Team, index: int, capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(["audit", "explain", str(index), "--store", str(team.path / "agentgate.db")]) == 0
    return capsys.readouterr().out


def _recorded(team: Team, grant_id: str) -> bool:
    with SQLiteStore(team.path / "agentgate.db") as store:
        return GrantRepository.recorded(store, grant_id) is not None


def test_audit_explain_names_every_link_of_an_allow_on_an_offline_chain(
    team: Team, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R67: explain of an allow on a chain delegated offline named no link, only the tip."""
    key = SigningKey.generate()
    helper = _offline(team, key)
    allowed = team.gate.authorize(helper, SEARCH)
    assert allowed.allowed and allowed.audit_index is not None
    out = _explain(team, allowed.audit_index, capsys)
    assert "has no record of this chain" not in out
    assert "bound to this entry" in out
    root, tip = helper.chain.links
    assert f"grant {root.id[:24]}: {root.issuer} -> {root.audience}" in out
    assert f"grant {tip.id[:24]}: {tip.issuer} -> {key.did}" in out


def test_revoke_holder_reaches_an_offline_grant_once_a_call_was_allowed_on_it(team: Team) -> None:
    """Review R67: a leaked sub-agent key's offline grant, used through the Gate, was not revoked
    by ``revoke_holder`` (never recorded), and the key went on acting."""
    key = SigningKey.generate()
    helper = _offline(team, key)
    assert team.gate.authorize(helper, SEARCH).allowed
    done = team.gate.revoke_holder(key.did, by="ops", reason="leaked")
    assert done.revoked == (helper.grant_id,)
    refused = team.gate.authorize(helper, SEARCH)
    assert not refused.allowed
    assert [f.code for f in refused.findings] == ["revoked"]


def test_grant_revoke_by_id_finds_an_offline_grant_used_through_the_gate(
    team: Team, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R67: ``grant revoke ID`` of such a grant warned that no grant with the id was
    recorded, as it does for a mistyped id."""
    helper = _offline(team, SigningKey.generate())
    assert team.gate.authorize(helper, SEARCH).allowed
    capsys.readouterr()
    assert main(["grant", "revoke", helper.grant_id, "--store", str(team.path / "agentgate.db")]) == 0
    captured = capsys.readouterr()
    assert f"revoked {helper.grant_id}" in captured.out
    assert "no grant with this id is recorded" not in captured.err


def test_a_refused_chain_is_not_recorded(team: Team) -> None:
    """Review R67: only a chain the Gate allowed is recorded; one from an untrusted root is not
    (its rows would be the presenter's word, and ``revoke_holder`` reads their audiences)."""
    stranger, key = SigningKey.generate(), SigningKey.generate()
    chain = issue(stranger, key.did, ["tool:search"], ttl=300)
    refused = team.gate.authorize(AgentIdentity("stranger", key, chain), SEARCH)
    assert not refused.allowed
    assert not _recorded(team, chain.id)


def test_a_chain_is_recorded_once_per_gate(team: Team, monkeypatch: pytest.MonkeyPatch) -> None:
    """Review R67: the recording is written at the first allow on a chain, not at every decision
    (a grant the Gate made itself is known recorded from the start)."""
    written: list[list[str]] = []
    real = team.gate.grants.record_grants

    def counted(rows: Iterable[GrantRow], *, now: int) -> None:
        rows = list(rows)
        written.append([row[0] for row in rows])
        real(rows, now=now)

    monkeypatch.setattr(team.gate.grants, "record_grants", counted)
    helper = _offline(team, SigningKey.generate())
    for _ in range(3):
        assert team.gate.authorize(helper, SEARCH).allowed
        assert team.gate.authorize(team.supervisor, SEARCH).allowed
    assert written == [list(helper.chain.ids)]
    assert _recorded(team, helper.grant_id)


def test_a_restarted_gate_records_the_chain_again_harmlessly(tmp_path: Path) -> None:
    """Review R67: recording is idempotent: a Gate that does not know the chain recorded (a
    restart) writes it again without error, and explain still reads one row per link."""
    team = _make_team(tmp_path)
    helper = _offline(team, SigningKey.generate())
    assert team.gate.authorize(helper, SEARCH).allowed
    gate = team.reopen()
    try:
        assert gate.authorize(helper, SEARCH).allowed
    finally:
        gate.close()
    with SQLiteStore(tmp_path / "agentgate.db") as store:
        rows = store.query("SELECT COUNT(*) FROM agentgate_grants WHERE id = ?", (helper.grant_id,))
    assert rows[0][0] == 1


def test_revoking_the_parent_by_id_names_the_offline_grant_dead_with_it(
    team: Team, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R67: ``grant revoke`` of the supervisor's grant listed no descendant: the grant it
    delegated offline, on which calls had been allowed, was dead with it but unnamed."""
    helper = _offline(team, SigningKey.generate())
    assert team.gate.authorize(helper, SEARCH).allowed
    capsys.readouterr()
    store = str(team.path / "agentgate.db")
    assert main(["grant", "revoke", team.supervisor.grant_id, "--store", store]) == 0
    assert f"1 recorded descendant grant(s) are dead with it: {helper.grant_id}" in capsys.readouterr().out


def test_the_gateway_records_a_client_delegated_chain_it_allows(tmp_path: Path) -> None:
    """Review R67: a gateway allow on a chain its client delegated to a helper (the usual remote
    set-up: the gateway never sees the delegation) left the chain unrecorded, so the helper's
    leaked key could not be cut off by ``revoke_holder``."""
    root, agent, helper = SigningKey.generate(), SigningKey.generate(), SigningKey.generate()
    policy = parse_policy(GATEWAY_POLICY.format(root=root.did, agent=agent.did), source="p.yaml")
    gateway = GatewayGate(policy, SQLiteStore(tmp_path / "ag.db"))
    call = Call.model("m", {"max_tokens": 1})
    try:
        granted = issue(
            root, agent.did, ["model:m"], ttl=600, max_depth=2, budget=Budget(1_000_000, "usd_micros")
        )
        chain = delegate(granted, agent, helper.did, ["model:m"], ttl=300)
        for _ in range(2):
            invocation = Invocation.sign(helper, chain, call).encode()
            assert gateway.authorize_invocation(chain.token, invocation, call, (1, 1)).allowed
        assert gateway.revoke_holder(helper.did, by="ops").revoked == (chain.id,)
        invocation = Invocation.sign(helper, chain, call).encode()
        assert gateway.authorize_invocation(chain.token, invocation, call, (1, 1)).status == 401
    finally:
        gateway.close()


def test_an_offline_chain_is_recorded_on_either_store(store: Store) -> None:
    """Review R67: as above, on SQLite and PostgreSQL: the allow's chain is in the grant store
    once the allow returns, link by link, and ``revoke_holder`` of its holder reaches it."""
    keys = {name: SigningKey.generate() for name in NAMES}
    policy = parse_policy(_policy_text({n: k.did for n, k in keys.items()}, 1_000_000), source="team.yaml")
    gate = Gate(policy, store)
    try:
        supervisor = gate.issue(keys["root"], name="supervisor", key=keys["supervisor"], role="supervisor")
        helper_key = SigningKey.generate()
        chain = delegate(supervisor.chain, keys["supervisor"], helper_key.did, ["tool:search"], ttl=300)
        assert gate.authorize(AgentIdentity("offline-helper", helper_key, chain), SEARCH).allowed
        for link in chain.links:
            assert GrantRepository.recorded(store, link.id) is not None
        assert gate.revoke_holder(helper_key.did, by="ops").revoked == (chain.id,)
    finally:
        gate.close()


def test_the_tips_remembered_are_bounded(team: Team, monkeypatch: pytest.MonkeyPatch) -> None:
    """Review R67: the set of chains a Gate knows recorded is cleared when full, and a chain
    forgotten so is recorded again (idempotently) at its next allow, never refused."""
    monkeypatch.setattr(_recording, "RECORDED_CHAINS_KEPT", 2)
    helpers = [_offline(team, SigningKey.generate()) for _ in range(3)]
    for helper in helpers * 2:
        assert team.gate.authorize(helper, SEARCH).allowed
    assert len(team.gate._recorded_chains) <= 2
    assert all(_recorded(team, helper.grant_id) for helper in helpers)


def test_an_approval_request_on_an_offline_chain_is_explained_link_by_link(
    team: Team, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R67: the ``approval_required`` entry an approver is asked about named no link of a
    chain delegated offline (only its tip), though the chain had passed every authority check."""
    key = SigningKey.generate()
    chain = delegate(
        team.supervisor.chain, team.keys["supervisor"], key.did, ["tool:publish?path^=reports/"], ttl=300
    )
    helper = AgentIdentity("offline-publisher", key, chain)
    asked = team.gate.authorize(helper, Call.tool("publish", {"path": "reports/q3.md"}), call_id="c1")
    assert asked.needs_approval and asked.audit_index is not None
    out = _explain(team, asked.audit_index, capsys)
    assert "bound to this entry" in out
    assert f"grant {chain.id[:24]}: {team.keys['supervisor'].did} -> {key.did}" in out
