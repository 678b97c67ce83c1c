"""Review R90: a NaN or an infinity in an attribute of a dataclass that is no field is refused, as
one in a field is.

R89 refused a NaN or an infinity anywhere in a chat body (orjson writes them as ``null``), walking
a dataclass by its fields. orjson writes a dataclass's ``__dict__``, every attribute set on it: a
``top_p`` of NaN set after the dataclass was made was sent as ``"top_p": null`` without a word
(the engine's default, not what the caller asked for). The values walked are now those orjson
writes: the ``__dict__``'s where there is one (names starting with an underscore left out, as
orjson leaves them out), else the fields'.
"""

from __future__ import annotations

import dataclasses
import math

import orjson
import pytest

from agentgate.dispatch._engine_fields import FieldError
from agentgate.dispatch.backends import _encode


@dataclasses.dataclass
class Sampling:
    temperature: float = 0.7


@dataclasses.dataclass(slots=True)
class SlottedSampling:
    temperature: float = 0.7
    _seed_weight: float = 1.0


def _body(sampling: object) -> dict[str, object]:
    return {"model": "m", "messages": [], "sampling": sampling}


@pytest.mark.parametrize("value", [math.nan, math.inf, [0.5, -math.inf]], ids=["nan", "inf", "in-a-list"])
def test_a_value_not_finite_in_an_attribute_that_is_no_field_is_refused(value: object) -> None:
    sampling = Sampling()
    sampling.top_p = value  # type: ignore[attr-defined]
    with pytest.raises(FieldError, match=r"body field 'sampling' cannot be written as JSON"):
        _encode(_body(sampling))


def test_an_attribute_orjson_leaves_out_is_not_walked() -> None:
    """Named with a leading underscore, an attribute is not written, so its NaN is not sent: the
    body is written as orjson writes it, not refused."""
    sampling = Sampling()
    sampling._cache = math.nan  # type: ignore[attr-defined]
    assert _encode(_body(sampling)) == orjson.dumps(_body(sampling))
    assert b"_cache" not in _encode(_body(sampling))


def test_a_dataclass_with_slots_is_walked_by_its_fields() -> None:
    assert _encode(_body(SlottedSampling(_seed_weight=math.nan))) == orjson.dumps(_body(SlottedSampling()))
    with pytest.raises(FieldError, match=r"body field 'sampling'"):
        _encode(_body(SlottedSampling(temperature=math.nan)))
