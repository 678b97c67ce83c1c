"""`agentgate grant check` on chains with budgets the Gate cannot meter (agentgate/cli/grant.py
``_check``): what it names, as the Gate names it, and what it writes to the store."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_cli_grant import cli, env
from test_cli_r63_unmetered_check import CHECK, POLICY

from agentgate.authority import Budget, Chain, issue, parse_chain
from agentgate.authority import _operations as operations
from agentgate.capabilities import Call
from agentgate.gate import AgentIdentity, Gate
from agentgate.keys import load_signing_key
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore, open_store

__all__ = ["env"]  # the fixture, imported: keys root, alice and bob under k/, a store in tmp_path


@pytest.fixture
def gate(env: Path) -> Iterator[Gate]:
    """A Gate over its own store whose policy trusts k/root and gives alice the worker role."""
    root, alice = load_signing_key(env / "k" / "root.key"), load_signing_key(env / "k" / "alice.key")
    policy = parse_policy(POLICY.format(root=root.did, alice=alice.did), source="gate.yaml")
    made = Gate(policy, SQLiteStore(env / "gate.db"))
    yield made
    made.close()


def _mixed_token(env: Path, capsys: pytest.CaptureFixture[str], units: tuple[str, str]) -> None:
    """t.tok, made by hand (``delegate`` refuses it): root gives bob tool:lookup with a budget of
    5 in ``units[0]``, and bob gives alice the same with 3 in ``units[1]``."""
    assert cli(capsys, "store", "init")[0] == 0
    root, bob, alice = (load_signing_key(env / "k" / f"{name}.key") for name in ("root", "bob", "alice"))
    parent = issue(root, bob.public, ["tool:lookup"], ttl=600, budget=Budget(5, units[0]), max_depth=2)
    tip = parent.tip
    child = operations._sign(
        bob,
        audience=alice.did,
        capabilities=operations._caps(["tool:lookup"]),
        budget=Budget(3, units[1]),
        not_before=tip.not_before,
        expires=tip.expires - 1,
        max_depth=1,
        purpose="",
        parent=tip.id,
        chain_bytes=len(parent.token),
    )
    links = (*parent.links, child)
    (env / "t.tok").write_text(Chain(links, operations._encode_chain(list(links))).token + "\n")


@pytest.mark.parametrize(
    "units", [("widgets", "usd"), ("usd", "widgets"), ("tokens", "usd"), ("usd", "calls")]
)
def test_grant_check_names_what_the_gate_names_for_a_chain_of_mixed_units(
    env: Path, gate: Gate, capsys: pytest.CaptureFixture[str], units: tuple[str, str]
) -> None:
    """Review R65: for a hand-made chain whose budgets are in two units, one or both of which the
    Gate cannot meter, grant check denies with the finding the Gate denies with (the chain's own
    fault, budget_unit_changed, decided before any unit is metered), naming no other unit."""
    _mixed_token(env, capsys, units)
    code, out, _ = cli(capsys, *CHECK, "--json")
    alice = load_signing_key(env / "k" / "alice.key")
    identity = AgentIdentity("alice", alice, parse_chain((env / "t.tok").read_text().strip()))
    refused = gate.authorize(identity, Call.tool("lookup", {}))
    assert not refused.allowed and refused.decision is not None
    decision = json.loads(out)
    assert code == 1
    assert [f["code"] for f in decision["findings"]] == [f.code for f in refused.decision.findings]
    assert decision["reasons"] == list(refused.reasons)


def _nonces(url: str) -> int:
    store = open_store(url)
    try:
        return int(store.query("SELECT count(*) FROM agentgate_nonces")[0][0])
    finally:
        store.close()


@pytest.mark.parametrize("dialect", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_a_check_refused_for_an_unmetered_budget_records_no_nonce(
    env: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    request: pytest.FixtureRequest,
    dialect: str,
) -> None:
    """Review R65: grant check recorded its invocation's nonce (the write ``decide`` makes for an
    allow) and then refused the call for its budget the Gate cannot meter: a refused check wrote
    to the store. The refusal now leaves the nonce table as it was, on SQLite and PostgreSQL."""
    url = str(env / "store.db") if dialect == "sqlite" else request.getfixturevalue("postgres_url")
    monkeypatch.setenv("AGENTGATE_STORE", url)
    assert cli(capsys, "store", "init")[0] == 0
    root, alice = load_signing_key(env / "k" / "root.key"), load_signing_key(env / "k" / "alice.key")
    chain = issue(root, alice.public, ["tool:lookup"], ttl=600, budget=Budget(5, "usd"), max_depth=0)
    (env / "t.tok").write_text(chain.token + "\n")
    code, out, _ = cli(capsys, *CHECK)
    assert code == 1 and "budget_unit_not_metered" in out
    assert _nonces(url) == 0
    chain = issue(root, alice.public, ["tool:lookup"], ttl=600, budget=Budget(5, "calls"), max_depth=0)
    (env / "t.tok").write_text(chain.token + "\n")
    assert cli(capsys, *CHECK)[0] == 0  # an allow records its nonce, as before
    assert _nonces(url) == 1
