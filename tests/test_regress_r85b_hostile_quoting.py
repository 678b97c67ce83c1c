"""A second regression review of R85: refusals that quote a hostile value say what it is, and the
split-units refusal is not given where no budget is asked.

- ``issue`` / ``revoke`` / ``delegate``'s ``now`` as a list holding ``10**5000`` made its own
  refusal a bare ``ValueError``, and ``Fraction(10**5000)`` an ``OverflowError`` out of
  ``math.isfinite``; each is the typed refusal now.
- ``PolicyIndex.evaluate`` "never raises for a bad call: denies", but a principal holding
  ``10**5000`` or nested 200,000 deep raised writing its reason.
- ``quoted`` read any ``ValueError`` from a ``__repr__`` as an integer too long to write.
- ``delegation_fault`` with no budget (the parent's whole budget) said "delegate them in separate
  grants" for capabilities whose rules are in different units, though each alone is refused for
  the missing budget, which the per-capability refusal names.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from test_regress_r85_gate_delegation_unit import _FETCH, _LOOKUP, _policy

from agentgate._http_limits import positive_seconds
from agentgate._shown import quoted
from agentgate.authority import ChainCache, GrantRepository, issue, revoke
from agentgate.capabilities import Call, Capability
from agentgate.dispatch.gateway import Gateway
from agentgate.errors import InputError
from agentgate.findings import Outcome
from agentgate.keys import SigningKey
from agentgate.policy import PolicyIndex, parse_policy
from agentgate.store import Store

KEYS = {n: SigningKey.generate() for n in ("root", "bot", "kid")}


def _deep(levels: int) -> list[object]:
    value: list[object] = []
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize("now", [[10**5000], Fraction(10**5000)], ids=["list-huge", "fraction-huge"])
def test_a_hostile_now_is_the_typed_refusal(store: Store, now: object) -> None:
    with pytest.raises(InputError):
        issue(KEYS["root"], KEYS["bot"].public, ["tool:x"], ttl=600, now=now)  # type: ignore[arg-type]
    with pytest.raises(InputError):
        revoke(GrantRepository(store), "a" * 64, now=now)  # type: ignore[arg-type]
    assert store.query("SELECT COUNT(*) FROM agentgate_revocations")[0][0] == 0


def test_a_hostile_chain_cache_size_is_the_typed_refusal() -> None:
    with pytest.raises(InputError, match="a list holding an integer too long to write"):
        ChainCache(size=[10**5000])  # type: ignore[arg-type]


@pytest.mark.parametrize("principal", [[10**5000], _deep(200_000)], ids=["huge", "deep"])
def test_evaluate_denies_a_hostile_principal(principal: object) -> None:
    index = PolicyIndex(parse_policy(_policy(KEYS, "a, b", _LOOKUP, _FETCH), source="p.yaml"))
    decision = index.evaluate(principal, Call.tool("lookup", {}))  # type: ignore[arg-type]
    assert decision.outcome is Outcome.DENY
    assert decision.reasons[0].endswith("is not a principal of this policy")


def test_a_repr_raising_its_own_value_error_is_not_called_a_huge_integer() -> None:
    class Broken:
        def __repr__(self) -> str:
            raise ValueError("no")

    assert quoted(Broken()) == "a Broken that cannot be written"
    assert quoted([10**5000]) == "a list holding an integer too long to write"


def test_no_budget_is_refused_for_the_budget_not_for_the_units() -> None:
    index = PolicyIndex(parse_policy(_policy(KEYS, "a, b", _LOOKUP, _FETCH), source="p.yaml"))
    did = KEYS["bot"].did
    caps = [Capability.parse("tool:lookup"), Capability.parse("tool:fetch")]
    fault = index.delegation_fault(did, did, caps, 60, None, "bot")
    assert fault is not None and fault.code == "delegation_budget_above_policy"
    assert "not the parent's whole budget" in fault.message
    assert "separate grants" not in fault.message
    split = index.delegation_fault(did, did, caps, 60, 5, "bot")
    assert split is not None and "separate grants" in split.message


def test_http_limits_and_the_gateways_body_limit_quote_a_value_too_long_to_write() -> None:
    """Reading R85 again: R85 quoted the shutdown grace by its size, but ``positive_seconds``
    beside it (every server and gateway time limit) and ``Gateway``'s ``max_body_bytes`` wrote
    ``10**5000`` whole: a bare ``ValueError``."""
    with pytest.raises(InputError, match="not an integer of 16610 bits"):
        positive_seconds(10**5000, "stall_s")
    with pytest.raises(InputError, match=r"max_body_bytes .* not a list holding an integer too long"):
        Gateway(None, None, max_body_bytes=[10**5000])  # type: ignore[arg-type]
