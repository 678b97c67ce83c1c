"""``ToolCall``'s written-out ``__init__`` (review R70: the frozen dataclass's generated one set
each field through ``object.__setattr__``, most of the cost of making a call on the scheduler's
hot path) takes the dataclass's fields, in their order, with their defaults, and makes the same
value: equal, hashed, printed, replaced, copied and refused as before."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle

import pytest

from agentgate.errors import InputError
from agentgate.tasks import ToolCall


def test_init_takes_the_dataclass_fields_in_order_with_their_defaults() -> None:
    """Review R70: the written-out ``__init__`` must not drift from the fields it replaces."""
    parameters = list(inspect.signature(ToolCall.__init__).parameters.values())[1:]
    fields = dataclasses.fields(ToolCall)
    assert [p.name for p in parameters] == [f.name for f in fields]
    made = ToolCall("t")
    for parameter, field in zip(parameters, fields, strict=True):
        assert field.init
        if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            assert parameter.default is inspect.Parameter.empty
        else:
            expected = field.default_factory() if field.default is dataclasses.MISSING else field.default  # type: ignore[misc]
            assert getattr(made, field.name) == expected


def test_each_call_made_without_arguments_gets_a_dict_of_its_own() -> None:
    """Review R70: the default ``arguments`` is a marker; every call gets a new empty dict."""
    first, second = ToolCall("t"), ToolCall("t")
    assert type(first.arguments) is dict and first.arguments == {}
    assert first.arguments is not second.arguments


def test_the_value_behaves_as_the_generated_dataclass_made_it() -> None:
    """Review R70: equality, hash, repr, replace, copy and pickle see the same fields."""
    call = ToolCall(
        "t", {"a": 1}, tenant="acme", priority="batch", authority_chain=("g1",), holder="did:key:z"
    )
    assert call == ToolCall(
        "t", {"a": 1}, tenant="acme", priority="batch", authority_chain=("g1",), holder="did:key:z"
    )
    assert call != ToolCall("t", {"a": 1}, tenant="other", priority="batch", authority_chain=("g1",))
    assert repr(call).startswith(
        "ToolCall(tool='t', arguments={'a': 1}, tenant='acme', principal='anonymous'"
    )
    moved = dataclasses.replace(call, tenant="other")
    assert (moved.tenant, moved.arguments, moved.holder) == ("other", {"a": 1}, "did:key:z")
    assert copy.copy(call) == call == pickle.loads(pickle.dumps(call))
    assert ToolCall("t", authority_chain=["g"]).authority_chain == ("g",)  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        call.tool = "u"  # type: ignore[misc]


def test_bad_fields_are_refused_as_before() -> None:
    """Review R70: the checks still run on every call made (``arguments=None`` is no default)."""
    with pytest.raises(InputError, match="arguments are a mapping"):
        ToolCall("t", arguments=None)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="tool name"):
        ToolCall("")
    with pytest.raises(InputError, match="tenant and principal"):
        ToolCall("t", tenant=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ToolCall()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        ToolCall("t", tools="x")  # type: ignore[call-arg]
