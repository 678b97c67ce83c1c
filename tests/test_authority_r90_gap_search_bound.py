"""Review R90: the search for a call no parent capability covers (``uncovered_call``, added in
R89b for the ``constraint_widened`` message) had no bound on its work. For each argument the
child constrains it tried values near the bounds, and for each it copied the whole call and
checked it against every parent capability, every constraint: quadratic in the number of
arguments. A refused chain is not cached, so one hand-signed link of 480 arguments (21 KB) cost
about a second on every decision, against about 20 ms without the search. Each value is now
checked only against the constraints on the argument it changes, and the search stops after a
number of values tried proportionate to what the capabilities hold (checks until review R90b),
falling back to the message that names no call. Work is counted in ``Constraint.allows`` calls,
not timed."""

from __future__ import annotations

import pytest

from agentgate.authority import delegate, issue, verify_chain
from agentgate.authority._grant import _encode_chain
from agentgate.authority._operations import _sign
from agentgate.capabilities import Call, Capability, Constraint, _coverage, covers, uncovered_call
from agentgate.errors import ScopeCreep
from agentgate.keys import SigningKey

ROOT, ALICE, BOB = (SigningKey.generate() for _ in range(3))
NOW = 1_800_000_000


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A one-item list holding how many times ``Constraint.allows`` has been called."""
    count = [0]
    allows = Constraint.allows

    def counted(self: Constraint, value: object) -> bool:
        count[0] += 1
        return allows(self, value)

    monkeypatch.setattr(Constraint, "allows", counted)
    return count


def _hand_signed(parent: list[str], child: str) -> str:
    """A chain whose second link, signed by the parent's holder without ``delegate``, is ``child``."""
    chain = issue(ROOT, ALICE.public, parent, ttl=3600, now=NOW, max_depth=3)
    link = _sign(
        ALICE,
        audience=BOB.public.did,
        capabilities=[Capability.parse(child)],
        budget=None,
        not_before=NOW,
        expires=NOW + 60,
        max_depth=0,
        purpose="",
        parent=chain.tip.id,
        chain_bytes=len(chain.token),
    )
    return _encode_chain((*chain.links, link))


def _refusal_checks(arguments: int, checks: list[int]) -> tuple[int, str]:
    """The reviewer's link: ``arguments`` arguments held by one parent capability, and ``zz``
    wider than either of two: the checks its refusal made, and its message."""
    names = [f"a{i}" for i in range(arguments)]
    parent = ["tool:pay?" + "&".join(f"{n}>=0" for n in names) + "&zz<=5", "tool:pay?zz>=5"]
    token = _hand_signed(parent, "tool:pay?zz>=0&zz<=10&" + "&".join(f"{n}>=0" for n in names))
    checks[0] = 0
    with pytest.raises(ScopeCreep) as refused:
        verify_chain(token, ROOT.public, now=NOW)
    assert refused.value.finding is not None and refused.value.finding.code == "constraint_widened"
    return checks[0], str(refused.value)


def test_a_refused_links_checks_grow_linearly_with_its_arguments(checks: list[int]) -> None:
    small, small_message = _refusal_checks(60, checks)
    large, large_message = _refusal_checks(240, checks)
    # Four times the arguments: about four times the checks (sixteen times until R90).
    assert large <= 5 * small, (small, large)
    assert large <= 20 * 2 * 241, large  # a few checks for each constraint the link and its parent hold
    for message in (small_message, large_message):
        assert "is within no single capability the parent holds" in message
        assert "even where several together cover it, as here" in message


def _exhausting(arguments: int) -> tuple[list[Capability], Capability, Call]:
    """Sixteen parent capabilities that ``base`` meets, each holding every argument to a range with
    two bounds of its own (six values tried at each), where only the last covers every value the
    child allows; the one call left out (``zz`` below 5) is on the last argument searched. (Review
    R90b: R90's parents shared their lower bound, and the search, cut after a number of checks,
    now counts the values it tries, which such parents no longer exhaust.)"""
    names = [f"a{i}" for i in range(arguments)]
    ranges = [(-3 * k - 0.5, 50 + 3 * k + 0.5) for k in range(15)] + [(-45.5, 100.5)]
    parents = [
        Capability.parse("tool:pay?" + "&".join(f"{n}>={lo}&{n}<={hi}" for n in names) + "&zz>=5")
        for lo, hi in ranges
    ]
    child = Capability.parse("tool:pay?" + "&".join(f"{n}>=0&{n}<=100" for n in names) + "&zz>=0&zz<=10")
    return parents, child, Call.tool("pay", {**dict.fromkeys(names, 0), "zz": 7})


def test_the_search_stops_after_its_budget_of_values(checks: list[int]) -> None:
    parents, child, base = _exhausting(40)
    values = sum(len(c.constraints) for c in (child, *parents))  # no sets: one value each
    assert uncovered_call(parents, child, base) is None
    # Each value tried is checked against the child's constraint and at most each parent's; each
    # parent against ``base`` once.
    tries = _coverage.SEARCH_TRIES_FLOOR + _coverage.SEARCH_TRIES_PER_VALUE * values
    assert checks[0] <= (1 + len(parents)) * tries + sum(len(p.constraints) for p in parents)


def test_what_the_budget_cut_short_is_a_call_a_longer_search_finds(monkeypatch: pytest.MonkeyPatch) -> None:
    parents, child, base = _exhausting(40)
    monkeypatch.setattr(_coverage, "SEARCH_TRIES_FLOOR", 10**9)
    found = uncovered_call(parents, child, base)
    assert found is not None and found[0] == "zz"
    assert covers(child, found[1]) and not any(covers(p, found[1]) for p in parents)


def test_a_search_out_of_checks_falls_back_to_the_message_that_names_no_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_coverage, "SEARCH_TRIES_FLOOR", 0)
    monkeypatch.setattr(_coverage, "SEARCH_TRIES_PER_VALUE", 0)
    chain = issue(ROOT, ALICE.public, ["tool:pay?amount<=100", "tool:pay?amount>=200"], ttl=3600, now=NOW)
    with pytest.raises(ScopeCreep) as refused:
        delegate(chain, ALICE, BOB.public, ["tool:pay?amount<=1000"], ttl=60, now=NOW)
    message = str(refused.value)
    assert "allows amount=" not in message and "several together" not in message
    assert message.endswith(
        "within one; delegate only capabilities each within one the parent holds "
        "(it holds tool:pay?amount<=100, tool:pay?amount>=200)"
    )
