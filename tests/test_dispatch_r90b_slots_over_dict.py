"""Regression review of R90: a NaN or an infinity in a field of a slots dataclass is refused even
where its instances also have a ``__dict__`` (a base class without slots gives them one).

R90 walked a dataclass's ``__dict__`` wherever it had one. orjson chooses otherwise: it writes the
fields of a dataclass whose class itself declares ``__slots__``, and the ``__dict__`` only of one
that does not. ``@dataclass(slots=True)`` over a plain dataclass or class keeps its fields in
slots, so its ``__dict__`` is empty: a NaN field was walked past and sent as ``null`` without a
word. The values walked are now chosen as orjson chooses them.
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
class SlottedOverDataclass(Sampling):
    top_p: float = 1.0


class Settings:
    """A plain class: its instances, and those of slots classes over it, have a ``__dict__``."""


@dataclasses.dataclass(slots=True)
class SlottedOverPlain(Settings):
    top_p: float = 1.0


@dataclasses.dataclass(slots=True)
class Slotted:
    top_p: float = 1.0


@dataclasses.dataclass
class UnslottedOverSlotted(Slotted):
    temperature: float = 0.7


def _body(sampling: object) -> dict[str, object]:
    return {"model": "m", "messages": [], "sampling": sampling}


SLOTTED_WITH_A_DICT = {
    "over-a-dataclass": SlottedOverDataclass(top_p=math.nan),
    "over-a-plain-class": SlottedOverPlain(top_p=math.inf),
    "base-field-over-a-dataclass": SlottedOverDataclass(temperature=-math.inf),
}


@pytest.mark.parametrize("sampling", SLOTTED_WITH_A_DICT.values(), ids=SLOTTED_WITH_A_DICT.keys())
def test_a_field_not_finite_of_a_slots_dataclass_with_a_dict_is_refused(sampling: object) -> None:
    assert hasattr(sampling, "__dict__")
    assert b"null" in orjson.dumps(_body(sampling))  # what would be sent
    with pytest.raises(FieldError, match=r"body field 'sampling' cannot be written as JSON"):
        _encode(_body(sampling))


def test_an_attribute_of_a_slots_dataclass_that_orjson_leaves_out_is_not_walked() -> None:
    """orjson writes the fields of a slots dataclass, not its ``__dict__``: a NaN set there is not
    sent, so the body is written as orjson writes it."""
    sampling = SlottedOverDataclass()
    sampling.extra = math.nan  # type: ignore[attr-defined]
    assert _encode(_body(sampling)) == orjson.dumps(_body(sampling))


def test_a_dataclass_without_slots_over_a_slots_one_is_walked_by_its_dict() -> None:
    """The other way round, orjson writes the ``__dict__``: a NaN in the slot it leaves out is not
    sent, one in the ``__dict__`` is refused."""
    sampling = UnslottedOverSlotted(top_p=math.nan)
    assert (
        _encode(_body(sampling))
        == orjson.dumps(_body(sampling))
        == b'{"model":"m","messages":[],"sampling":{"temperature":0.7}}'
    )
    with pytest.raises(FieldError, match=r"body field 'sampling'"):
        _encode(_body(UnslottedOverSlotted(temperature=math.nan)))
