"""Regression review of R89: orjson writes an ``Enum`` member as its value, so a member whose value
is NaN or an infinity was written as ``null``, and the NaN refusal of review R89 (``_finite``)
did not look inside the member: a ``temperature`` of such a member was sent as
``"temperature":null``, the silent replacement that refusal meant to end. A member is now judged
by its value: such a body is refused with a ``FieldError`` naming its field, before anything is
sent, saying it holds a value out of range; a member of a finite value is written as its value,
as before."""

from __future__ import annotations

import enum
import math

import orjson
import pytest

from agentgate.dispatch._engine_fields import FieldError
from agentgate.dispatch.backends import _encode


class Knob(enum.Enum):
    HOT = math.nan
    COLD = -math.inf
    MILD = 0.7
    NESTED = (0.5, math.nan)


class Level(enum.IntEnum):
    LOW = 1


@pytest.mark.parametrize("member", [Knob.HOT, Knob.COLD, Knob.NESTED], ids=["nan", "minus-inf", "nested-nan"])
def test_an_enum_member_of_a_value_that_is_not_finite_is_refused_naming_its_field(member: Knob) -> None:
    with pytest.raises(FieldError) as refused:
        _encode({"model": "m", "messages": [], "temperature": member})  # until the review: sent as null
    assert refused.value.param == "temperature"
    # Why in orjson's words, which write the member: not json's "Object of type Knob is not JSON
    # serializable", which is no reason to refuse it.
    assert str(refused.value) == (
        "body field 'temperature' cannot be written as JSON: Out of range float values are not JSON compliant"
    )


def test_an_enum_member_deep_in_the_body_is_judged_by_its_value() -> None:
    with pytest.raises(FieldError) as refused:
        _encode({"model": "m", "logit_bias": {"50256": Knob.COLD}, "metadata": None})
    assert refused.value.param == "logit_bias"


def test_enum_members_of_finite_values_are_written_as_their_values() -> None:
    body = {"model": "m", "temperature": Knob.MILD, "seed": Level.LOW, "top_p": None}
    assert orjson.loads(_encode(body)) == {"model": "m", "temperature": 0.7, "seed": 1, "top_p": None}
