"""Review R64: a ``Constraint`` built directly holds the canonical form ``Constraint.of`` holds, so
that it compares, renders, round-trips and goes into a grant as that one does."""

from __future__ import annotations

from typing import Any

import pytest

from agentgate.authority import issue, parse_chain
from agentgate.capabilities import Call, Capability, Constraint, covers, format_capability, parse_capability
from agentgate.keys import SigningKey


@pytest.mark.parametrize(
    ("fields", "spec"),
    [
        ({"one_of": ("EUR",)}, {"eq": "EUR"}),
        ({"one_of": ("EUR", "EUR", "USD")}, {"in": ["EUR", "USD"]}),
        ({"one_of": (1, 1.0, 2)}, {"in": [1, 2]}),
        ({"one_of": (1, 1.0)}, {"eq": 1}),
        ({"one_of": (True, 1)}, {"in": [True, 1]}),
        ({"eq": "EUR", "one_of": ("EUR",)}, {"eq": "EUR", "in": ["EUR"]}),
        ({"one_of": ("a", "a"), "prefix": "a"}, {"eq": "a", "prefix": "a"}),
    ],
)
def test_a_set_built_directly_is_held_as_constraint_of_holds_it(
    fields: dict[str, Any], spec: dict[str, Any]
) -> None:
    """Review R64: ``Constraint(one_of=...)`` keeps each value once and a lone value as ``eq``,
    as ``Constraint.of`` does: until review R64 it kept them as given, so it differed from the
    equal constraint ``of`` builds, ``parse_capability(str(cap)) != cap``, and ``issue`` refused
    the capability with "capability is not in canonical form" (a grant of it could not be made)."""
    built = Constraint(**fields)
    assert built == Constraint.of(spec)
    assert built.to_dict() == spec
    cap = Capability("tool:x", "invoke", (("cur", built),))
    assert parse_capability(format_capability(cap)) == cap
    holder = SigningKey.generate()
    chain = issue(SigningKey.generate(), holder.did, [cap], ttl=60)
    assert parse_chain(chain.token).links[0].capabilities == (cap,)
    value = spec.get("eq", spec.get("in", [None])[0])
    assert covers(cap, Call("tool:x", "invoke", {"cur": value}))
