"""Review R87: ``SimServer`` took any ``model_name``: with ``None`` it served ``/v1/models`` as
``{"id": null}``, which no OpenAI client reads as a model. It is now refused (``InputError``
naming the argument) unless it is non-empty text."""

from __future__ import annotations

import pytest

from agentgate.errors import InputError
from agentgate.sim import SimServer


@pytest.mark.parametrize(("name", "given"), [(None, "None"), ("", "empty text"), (7, "7"), (b"m", "a bytes")])
def test_a_model_name_that_is_no_text_is_refused(name: object, given: str) -> None:
    with pytest.raises(InputError) as refused:
        SimServer(model_name=name)  # type: ignore[arg-type]
    assert str(refused.value) == f"model_name must be non-empty text (the served model's id), not {given}"


def test_a_model_name_is_served_as_given() -> None:
    assert SimServer(model_name="m-1").model_name == "m-1"
