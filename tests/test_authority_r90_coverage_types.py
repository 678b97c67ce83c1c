"""Review R90: ``uncovered_call`` and ``covered_together``, public since R89b, took anything and
failed inside with a bare ``AttributeError`` or ``TypeError`` (``'str' object has no attribute
'resource'``), and so did the older ``witness``, where ``covers`` and ``attenuates`` refuse the
wrong types with a ``CapabilityError`` naming what they take and what they got. All five now do."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agentgate.capabilities import Call, Capability, covered_together, uncovered_call, witness
from agentgate.errors import CapabilityError

CAP = Capability.parse("tool:pay?amount<=5")
WIDER = Capability.parse("tool:pay?amount<=9")
CALL = Call.tool("pay", {"amount": 0})


@pytest.mark.parametrize(
    ("run", "message"),
    [
        (
            lambda: covered_together(["tool:pay?amount<=1"], CAP),  # type: ignore[list-item]
            "covered_together(parents, child) takes a sequence of Capability objects and a Capability, "
            "got a list holding a str and Capability",
        ),
        (
            lambda: covered_together(CAP, CAP),  # type: ignore[arg-type]
            "covered_together(parents, child) takes a sequence of Capability objects and a Capability, "
            "got Capability and Capability",
        ),
        (
            lambda: covered_together("tool:pay", CAP),  # type: ignore[arg-type]
            "covered_together(parents, child) takes a sequence of Capability objects and a Capability, "
            "got str and Capability",
        ),
        (
            lambda: covered_together([CAP], "tool:pay?amount<=9"),  # type: ignore[arg-type]
            "covered_together(parents, child) takes a sequence of Capability objects and a Capability, "
            "got Capability objects and str",
        ),
        (
            lambda: uncovered_call([CAP], WIDER, None),  # type: ignore[arg-type]
            "uncovered_call(parents, child, base) takes a sequence of Capability objects, a Capability "
            "and a Call, got Capability objects, Capability and NoneType",
        ),
        (
            lambda: uncovered_call(("tool:pay?amount<=1",), WIDER, CALL),  # type: ignore[arg-type]
            "uncovered_call(parents, child, base) takes a sequence of Capability objects, a Capability "
            "and a Call, got a tuple holding a str, Capability and Call",
        ),
        (
            lambda: witness("tool:pay", CAP),  # type: ignore[arg-type]
            "witness(parent, child) takes two Capability objects (parse_capability), got str and Capability",
        ),
        (
            lambda: witness(CAP, None),  # type: ignore[arg-type]
            "witness(parent, child) takes two Capability objects (parse_capability), got Capability and NoneType",
        ),
    ],
)
def test_the_coverage_functions_refuse_the_wrong_types_naming_them(
    run: Callable[[], object], message: str
) -> None:
    with pytest.raises(CapabilityError) as refused:
        run()
    assert str(refused.value) == message


def test_a_list_or_a_tuple_of_capabilities_is_taken() -> None:
    parents = [Capability.parse("tool:pay?amount<=5"), Capability.parse("tool:pay?amount>=7")]
    for given in (parents, tuple(parents)):
        assert not covered_together(given, WIDER)
        found = uncovered_call(given, WIDER, CALL)
        assert found is not None and found[0] == "amount" and found[1].args["amount"] == 6
    assert witness(CAP, WIDER) is not None and witness(WIDER, CAP) is None
