"""Review R68: the token parser's fast path (``capability_from_canonical``) returns a capability
only where ``Capability.from_dict`` would return an equal one, and otherwise ``None``: it never
raises, and it holds argument names as exact ``str``, as every other way of building one does."""

from __future__ import annotations

from typing import Any

import pytest

from agentgate.capabilities import Capability, capability_from_canonical
from agentgate.errors import CapabilityError


class _Name(str):
    """A ``str`` subclass, as a caller's own key type would be."""


def _data(name: object) -> dict[str, Any]:
    return {"resource": "tool:x", "action": "invoke", "constraints": {name: {"eq": 1}}}


@pytest.mark.parametrize("name", [1, None, ("a",), b"a", 1.5])
def test_an_argument_name_that_is_not_text_gives_none_not_a_type_error(name: object) -> None:
    """Review R68: a constraint keyed by a name that is not a string raised a bare ``TypeError``
    (``len`` of an int, the regex of a tuple) out of a function documented never to raise, where
    ``Capability.from_dict`` refuses it with a ``CapabilityError``."""
    with pytest.raises(CapabilityError):
        Capability.from_dict(_data(name))
    assert capability_from_canonical(_data(name)) is None


def test_an_argument_name_of_a_str_subclass_is_left_to_the_general_path() -> None:
    """Review R68: a name of a ``str`` subclass was held as it was given, where every other way
    of building a capability holds it as the exact ``str`` (so no method of the caller's class
    ever looks an argument up in a call). The general path decides it, and holds a ``str``."""
    assert capability_from_canonical(_data(_Name("a"))) is None
    built = Capability.from_dict(_data(_Name("a")))
    assert type(built.constraints[0][0]) is str
    assert capability_from_canonical(_data("a")) == built
