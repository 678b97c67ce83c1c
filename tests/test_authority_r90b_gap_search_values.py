"""Review R90b: R90 bounded the search for a call no parent capability covers (``uncovered_call``,
the ``constraint_widened`` message) at 1,000 checks plus 16 for each value the capabilities
constrain with, each value tried costing a check against the child and against each parent. The
values tried grow with the parents' bounds, so against a parent split into 16 ranges on one
argument (a search of a millisecond) the budget ran out before the gap between two of them and no
call was named, where R89b named one. The search now counts the values it tries (at most six at
each bound), 1,000 plus 6 for each value constrained with: it runs out only among more than 160
ranges with two bounds of their own each (test_authority_r90_gap_search_bound.py)."""

from __future__ import annotations

import pytest

from agentgate.authority import delegate, issue
from agentgate.capabilities import Call, Capability, covers, uncovered_call
from agentgate.errors import ScopeCreep
from agentgate.keys import SigningKey

ROOT, ALICE, BOB = (SigningKey.generate() for _ in range(3))
NOW = 1_800_000_000


def _split(pieces: int, arguments: int) -> tuple[list[Capability], Capability, Call]:
    """A range of ``pieces`` hundreds on the last of ``arguments`` arguments, split into one
    parent capability per hundred, with a gap (50 wide) before the last hundred; the child holds
    the whole range on each argument, and every parent the whole range on the others."""
    names = [f"x{j}" for j in range(arguments)]
    parents = []
    for i in range(pieces):
        held = {n: {"ge": 0, "lt": 100 * pieces} for n in names}
        held[names[-1]] = {"ge": 100 * i, "lt": 100 * i + (50 if i == pieces - 2 else 100)}
        parents.append(Capability.of("tool:pay", "invoke", held))
    child = Capability.of("tool:pay", "invoke", {n: {"ge": 0, "lt": 100 * pieces} for n in names})
    return parents, child, Call("tool:pay", "invoke", dict.fromkeys(names, 0))


@pytest.mark.parametrize("pieces", [12, 16])
@pytest.mark.parametrize("arguments", [1, 4])
def test_a_call_in_the_gap_between_a_parents_ranges_is_named(pieces: int, arguments: int) -> None:
    parents, child, base = _split(pieces, arguments)
    found = uncovered_call(parents, child, base)
    assert found is not None, (pieces, arguments)
    name, call = found
    gap_start = 100 * (pieces - 2) + 50
    assert name == f"x{arguments - 1}" and gap_start <= call.args[name] < gap_start + 50
    assert covers(child, call) and not any(covers(p, call) for p in parents)


def test_delegating_past_a_parent_of_sixteen_ranges_names_the_call_in_their_gap() -> None:
    held = [f"tool:pay?amount>={100 * i}&amount<{100 * i + (50 if i == 14 else 100)}" for i in range(16)]
    chain = issue(ROOT, ALICE.public, held, ttl=3600, now=NOW)
    with pytest.raises(ScopeCreep) as refused:
        delegate(chain, ALICE, BOB.public, ["tool:pay?amount>=0&amount<1600"], ttl=60, now=NOW)
    assert refused.value.finding is not None and refused.value.finding.code == "constraint_widened"
    assert "allows amount=1450, which the parent's capability does not" in str(refused.value)
