"""`agentgate grant check` and `grant inspect` on a chain whose budget is in a unit the Gate does
not meter (a token made by the library or another implementation: the token format allows any
unit name, docs/token-format.md).

Until review R63 `grant check` printed `allow` and exited 0 for such a chain, while the Gate
refuses every call on it ("cannot be metered"), and `grant inspect` showed it unmarked."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_cli_grant import cli, env

from agentgate.authority import Budget, issue, parse_chain
from agentgate.capabilities import Call
from agentgate.gate import AgentIdentity, Gate
from agentgate.keys import load_signing_key
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

__all__ = ["env"]  # the fixture, imported: keys root, alice and bob under k/, a store in tmp_path

CHECK = ("grant", "check", "t.tok", "--as", "k/alice.key", "--trust", "k/root.pub", "--tool", "lookup")

POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
principals:
  alice: {{kind: agent, did: "{alice}", roles: [worker]}}
tools:
  lookup: {{}}
roles:
  worker:
    kind: agent
    capabilities:
      - resource: tool:lookup
    ttl_s: 600
"""


def _token(env: Path, capsys: pytest.CaptureFixture[str], unit: str) -> None:
    """t.tok: root gives alice tool:lookup with a budget of 5 ``unit``, made by the library."""
    assert cli(capsys, "store", "init")[0] == 0
    root, alice = load_signing_key(env / "k" / "root.key"), load_signing_key(env / "k" / "alice.key")
    chain = issue(root, alice.public, ["tool:lookup"], ttl=600, budget=Budget(5, unit), max_depth=0)
    (env / "t.tok").write_text(chain.token + "\n")


@pytest.fixture
def gate(env: Path) -> Iterator[Gate]:
    """A Gate over its own store whose policy trusts k/root and gives alice the worker role."""
    root, alice = load_signing_key(env / "k" / "root.key"), load_signing_key(env / "k" / "alice.key")
    policy = parse_policy(POLICY.format(root=root.did, alice=alice.did), source="gate.yaml")
    made = Gate(policy, SQLiteStore(env / "gate.db"))
    yield made
    made.close()


@pytest.mark.parametrize(
    "unit", ["usd", "widgets", "gpu_seconds", "micro_usd", "usd_micros", "tokens", "calls"]
)
def test_grant_check_allows_a_budget_unit_exactly_where_the_gate_does(
    env: Path, gate: Gate, capsys: pytest.CaptureFixture[str], unit: str
) -> None:
    """Review R63: `grant check` must not promise what the Gate refuses: for each unit, a tool
    call on a grant with a budget in it is allowed by `grant check` (exit 0) exactly when a real
    Gate allows the same call on the same chain."""
    _token(env, capsys, unit)
    code, out, err = cli(capsys, *CHECK)
    chain_token = (env / "t.tok").read_text().strip()
    alice = load_signing_key(env / "k" / "alice.key")
    identity = AgentIdentity("alice", alice, parse_chain(chain_token))
    allowed = gate.authorize(identity, Call.tool("lookup", {})).allowed
    assert (code == 0) is allowed, (unit, code, out, err, allowed)
    assert code in (0, 1), err


def test_grant_check_denies_an_unmetered_budget_with_a_finding_naming_the_units(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R63: the deny names the unit, the grant and the units agentgate meters, as a finding
    (kind, code, field budget) in text and in --json, exit 1."""
    _token(env, capsys, "usd")
    code, out, err = cli(capsys, *CHECK)
    assert code == 1 and err == "", err
    assert out.startswith("deny: "), out
    assert "authority_chain_opacity budget_unit_not_metered [budget]:" in out, out
    assert "'usd'" in out and "usd_micros, tokens or calls" in out, out
    code, out, _ = cli(capsys, *CHECK, "--json")
    decision = json.loads(out)
    assert code == 1 and decision["outcome"] == "deny"
    (finding,) = decision["findings"]
    assert finding["code"] == "budget_unit_not_metered" and finding["field"] == "budget"
    assert finding["grant"] == decision["chain"][0] and "'usd'" in finding["message"]
    assert decision["budgets"] == [{"grant": decision["chain"][0], "amount": 5, "unit": "usd"}]


def test_grant_check_reports_a_chains_own_fault_before_its_unit(
    env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R63: as the Gate decides the chain first, a call the grant does not cover is denied
    call_not_covered, not budget_unit_not_metered."""
    _token(env, capsys, "usd")
    code, out, _ = cli(capsys, *CHECK[:-1], "other", "--json")
    assert code == 1 and [f["code"] for f in json.loads(out)["findings"]] == ["call_not_covered"]


def test_grant_inspect_marks_an_unmetered_budget(env: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review R63: inspect showed `budget 5 usd` unmarked, exit 0; it now lists the finding under
    the link (text and JSON) and exits 1, as for any marked link. A metered unit stays unmarked."""
    _token(env, capsys, "usd")
    code, out, _ = cli(capsys, "grant", "inspect", "t.tok")
    assert code == 1 and "budget 5 usd" in out, out
    assert "! authority_chain_opacity budget_unit_not_metered:" in out, out
    code, out, _ = cli(capsys, "grant", "inspect", "t.tok", "--json")
    (link,) = json.loads(out)["links"]
    assert code == 1 and [f["code"] for f in link["findings"]] == ["budget_unit_not_metered"]
    _token(env, capsys, "calls")
    code, out, _ = cli(capsys, "grant", "inspect", "t.tok")
    assert code == 0 and "budget 5 calls" in out and "!" not in out, out
