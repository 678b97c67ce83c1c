"""Review R93 of ``replay``'s arguments: the containers, not only what they hold.

``replay`` checked every request and setting but not ``requests`` itself or ``engines``' values: a
generator of requests was used up by the checks, then had no ``len()`` (a bare ``TypeError``), and
a ``LatencyModel`` given for its ``Engine`` (an easy mix-up) was a bare ``AttributeError``
midway. Both are now an ``InputError`` naming the argument (and the backend), replaying nothing.
"""

from __future__ import annotations

import dataclasses

import pytest
from test_sim_r87_request_fields import _GOOD, _SendAllBounded

from agentgate.errors import InputError
from agentgate.sim import LLAMA_8B_H100, Engine, replay

_TRACE = [dataclasses.replace(_GOOD, id=f"q{i}", arrival=i / 10) for i in range(3)]


def test_a_generator_of_requests_is_refused_naming_the_argument() -> None:
    with pytest.raises(InputError, match=r"^requests must be a sequence of TraceRequest .*not a generator$"):
        replay((r for r in _TRACE), {"b": Engine(LLAMA_8B_H100)}, _SendAllBounded())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("engine", "shown"), [(LLAMA_8B_H100, "a LatencyModel"), ("x", "a str"), (None, "None")]
)
def test_an_engine_that_is_no_engine_is_refused_naming_the_backend(engine: object, shown: str) -> None:
    engines = {"a": Engine(LLAMA_8B_H100), "b": engine}
    with pytest.raises(InputError, match=rf"^engines\['b'\] must be an Engine .*, not {shown}$"):
        replay(_TRACE, engines, _SendAllBounded())  # type: ignore[arg-type]


def test_engines_that_are_no_mapping_are_refused() -> None:
    with pytest.raises(
        InputError, match=r"^engines must be a mapping of backend names to Engine, not a list$"
    ):
        replay(_TRACE, [Engine(LLAMA_8B_H100)], _SendAllBounded())  # type: ignore[arg-type]


def test_a_tuple_of_requests_is_replayed_as_the_list() -> None:
    outcomes = replay(tuple(_TRACE), {"b": Engine(LLAMA_8B_H100)}, _SendAllBounded())  # type: ignore[arg-type]
    assert [(o.request.id, o.rejected) for o in outcomes] == [("q0", None), ("q1", None), ("q2", None)]
    as_list = replay(list(_TRACE), {"b": Engine(LLAMA_8B_H100)}, _SendAllBounded())  # type: ignore[arg-type]
    assert outcomes == as_list
