"""Review R96: a held role that holds no rule, itself or through ``inherits``, decides no call, so
it no longer lifts the bounds of a root grant to its holder (``PolicyIndex._bounding_roles``).

Until then ``root_ttl_s``, ``root_budgets`` and ``delegation_depth`` read every role the principal
held: an agent holding ``refunder`` (600 s, 3 calls, ``max_depth`` 1) and a description-only
``on-call`` role had a grant living 86,400 s with no budget accepted, and with ``on-call``
declaring ``delegation: {max_depth: 5}`` a chain three links deep. A principal holding two roles
that both hold rules may still carry either's terms (review R59).

Real components: the Gate over a SQLite store, chains signed with the library's ``issue``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.authority import Budget, delegate, issue
from agentgate.capabilities import Call
from agentgate.gate import AgentIdentity, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

KEYS = {name: SigningKey.generate() for name in ("root", "agent", "k1", "k2", "k3")}
FETCH = Call.tool("web.fetch", {"url": "x"})
LINK_BUDGET = Budget(10, "calls")  # within fetcher's delegation rule


def _policy(on_call: str) -> str:
    return f"""version: 1
trust_anchors:
  root: {{did: "{KEYS["root"].did}"}}
principals:
  agent: {{kind: agent, did: "{KEYS["agent"].did}", roles: [fetcher, on-call]}}
tools:
  web.fetch: {{args: {{url: {{type: string}}}}}}
roles:
  fetcher:
    kind: agent
    capabilities: [{{resource: tool:web.fetch}}]
    budget: {{limit: 100, unit: calls}}
    ttl_s: 600
    delegation:
      max_depth: 1
      max_ttl_s: 300
      budget: {{limit: 10, unit: calls}}
      capabilities: [{{resource: tool:web.fetch}}]
  on-call:
    kind: agent
    description: paged at night
{on_call}"""


RULELESS = "    delegation: {max_depth: 5, max_ttl_s: 300}\n"
RULED = RULELESS + "    capabilities: [{resource: tool:web.fetch}]\n    ttl_s: 86400\n"


def _verdict(
    tmp_path: Path,
    on_call: str,
    chain_of: int,
    *,
    link_ttl: int = 300,
    link_budget: Budget | None = LINK_BUDGET,
    **root: object,
) -> tuple[str, list[str]]:
    """The verdict and finding codes of a fetch by the last of ``chain_of`` links (each living
    ``link_ttl`` with ``link_budget``) below a root grant to agent with the terms ``root``."""
    with Gate(parse_policy(_policy(on_call), source="p.yaml"), SQLiteStore(tmp_path / "s.db")) as gate:
        chain = issue(KEYS["root"], KEYS["agent"].public, ["tool:web.fetch"], **root)  # type: ignore[arg-type]
        holder = "agent"
        for k in ("k1", "k2", "k3")[:chain_of]:
            chain = delegate(
                chain, KEYS[holder], KEYS[k].public, ["tool:web.fetch"], ttl=link_ttl, budget=link_budget
            )
            holder = k
        auth = gate.authorize(AgentIdentity(name=holder, key=KEYS[holder], chain=chain), FETCH)
        return auth.verdict, [f.code for f in auth.findings]


def test_a_ruleless_role_does_not_lift_the_root_grant_s_lifetime_or_budget(tmp_path: Path) -> None:
    assert _verdict(tmp_path, RULELESS, 0, ttl=86400) == ("deny", ["root_ttl_above_policy"])
    assert _verdict(tmp_path, RULELESS, 0, ttl=600) == ("deny", ["root_budget_above_policy"])
    assert _verdict(tmp_path, RULELESS, 0, ttl=600, budget=Budget(100, "calls")) == ("allow", [])


def test_a_ruleless_role_does_not_deepen_the_chain_allowed(tmp_path: Path) -> None:
    root = {"ttl": 600, "max_depth": 5, "budget": Budget(100, "calls")}
    assert _verdict(tmp_path, RULELESS, 1, **root) == ("allow", [])
    assert _verdict(tmp_path, RULELESS, 3, **root) == ("deny", ["delegation_wider_than_policy"])


@pytest.mark.parametrize("inherited", [False, True], ids=["own_rule", "inherited_rule"])
def test_a_role_that_holds_a_rule_still_bounds_as_before(tmp_path: Path, inherited: bool) -> None:
    """Review R59 holds: a principal holding two ruled roles may carry either's terms (here on-call's
    86,400 s with no budget, and its depth of 5); a rule held through inherits counts."""
    on_call = RULED if not inherited else RULELESS + "    inherits: [fetcher]\n    ttl_s: 86400\n"
    assert _verdict(tmp_path, on_call, 0, ttl=86400) == ("allow", [])
    assert _verdict(tmp_path, on_call, 3, ttl=600, max_depth=5) == ("allow", [])


def test_a_ruleless_role_s_delegation_rule_does_not_loosen_what_its_holder_hands_on(tmp_path: Path) -> None:
    """Nor its ``delegation`` rule's lifetime and budget (the R96 regression review): fetcher's
    links last 300 s with 10 calls at most; on-call, holding no rule, declared links of 86,400 s
    with no budget, and a link of 500 s with none was allowed."""
    on_call = "    delegation: {max_depth: 1, max_ttl_s: 86400, capabilities: [{resource: tool:web.fetch}]}\n"
    root = {"ttl": 600, "max_depth": 1, "budget": Budget(100, "calls")}
    assert _verdict(tmp_path, on_call, 1, link_ttl=500, link_budget=None, **root) == (
        "deny",
        ["delegation_ttl_above_policy"],
    )
