"""Review R89b: a child capability within no single parent capability, and not within them all
together either, was told it "is within no single capability the parent holds ... even where
several together cover it", naming no call, where docs/concepts.md keeps that message for a child
within several together and names a call no parent capability covers otherwise. Each parent
capability's witness was a call another one covers (``amount<=100`` and ``amount>=200``, child
``amount<=1000``), and nothing further was tried. A call between their bounds is now looked for
(``amount=101``), and the message that says several together cover the child is given only where
they do; otherwise it says only that each delegated capability must be within one."""

from __future__ import annotations

import pytest

from agentgate.authority import delegate, issue
from agentgate.capabilities import Call, Capability, covered_together, covers, uncovered_call
from agentgate.errors import ScopeCreep
from agentgate.keys import SigningKey

ROOT, ALICE, BOB = (SigningKey.generate() for _ in range(3))
NOW = 1_800_000_000


def _refusal(parent: list[str], child: list[str]) -> str:
    chain = issue(ROOT, ALICE.public, parent, ttl=3600, now=NOW)
    with pytest.raises(ScopeCreep) as refused:
        delegate(chain, ALICE, BOB.public, child, ttl=60, now=NOW)
    assert refused.value.finding is not None and refused.value.finding.code == "constraint_widened"
    return str(refused.value)


@pytest.mark.parametrize(
    ("parent", "child", "named"),
    [
        (["tool:pay?amount<=100", "tool:pay?amount>=200"], "tool:pay?amount<=1000", "amount=101"),
        (["tool:pay?amount<100", "tool:pay?amount>100"], "tool:pay?amount>=0", "amount=100"),
        (
            ["tool:pay?currency=EUR", "tool:pay?currency=GBP"],
            "tool:pay?currency=EUR|GBP|USD",
            "currency='USD'",
        ),
    ],
)
def test_a_child_outside_the_parents_capabilities_together_is_told_a_call_none_covers(
    parent: list[str], child: str, named: str
) -> None:
    message = _refusal(parent, [child])
    assert f"allows {named}, which the parent's capability does not" in message, message
    assert "several together" not in message
    name, value = named.split("=")
    call = Call.tool("pay", {name: int(value) if value.isdigit() else value.strip("'")})
    assert covers(Capability.parse(child), call)
    assert not any(covers(Capability.parse(held), call) for held in parent)


def test_a_child_within_the_parents_capabilities_together_is_told_so() -> None:
    message = _refusal(
        ["tool:pay?amount<100", "tool:pay?amount>100", "tool:pay?amount=100"], ["tool:pay?amount>=0"]
    )
    assert "is within no single capability the parent holds" in message
    assert "even where several together cover it, as here; split it into capabilities" in message
    assert "allows amount=" not in message


def test_where_no_call_is_found_nor_cover_shown_the_message_claims_neither() -> None:
    """Three capabilities that cover the child together, split on two arguments: the test that
    they cover it does not reach that far, and the message says only what is so."""
    parent = ["tool:pay?a<=1", "tool:pay?b<=1", "tool:pay?a>1&b>1"]
    message = _refusal(parent, ["tool:pay?a<=5&b<=5"])
    assert "is within no single capability the parent holds, and each delegated capability must be" in message
    assert "several together" not in message and "allows a=" not in message and "allows b=" not in message
    assert message.endswith(
        "within one; delegate only capabilities each within one the parent holds "
        "(it holds tool:pay?a<=1, tool:pay?b<=1, tool:pay?a>1&b>1)"
    )


def test_covered_together_is_said_only_where_every_value_is_held() -> None:
    parents = [Capability.parse(c) for c in ("tool:pay?amount<=100", "tool:pay?amount>100&amount<=500")]
    assert covered_together(parents, Capability.parse("tool:pay?amount<=500"))
    assert not covered_together(parents, Capability.parse("tool:pay?amount<=501"))
    gap = [Capability.parse(c) for c in ("tool:pay?amount<100", "tool:pay?amount>100")]
    assert not covered_together(gap, Capability.parse("tool:pay?amount>=0"))
    filled = [*gap, Capability.parse("tool:pay?amount=100")]
    assert covered_together(filled, Capability.parse("tool:pay?amount>=0"))
    child = Capability.parse("tool:pay?amount>=0")
    found = uncovered_call(gap, child, Call.tool("pay", {"amount": 0}))
    assert found is not None and found[0] == "amount" and found[1].args == {"amount": 100}
    assert uncovered_call(filled, child, Call.tool("pay", {"amount": 0})) is None
