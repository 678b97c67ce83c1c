"""Review R84: a policy's ``priority_classes.*.weight`` above the scheduler's ``MAX_WEIGHT``
(1,000,000) loaded, and building the scheduler's ``PriorityClass`` from it raised
``InputError`` far from the file. The loader refuses it at its line and column, reading the one
constant the scheduler reads."""

from __future__ import annotations

import pytest

from agentgate.errors import PolicyError
from agentgate.policy import parse_policy
from agentgate.tasks import PriorityClass
from agentgate.tasks._config import MAX_WEIGHT


def _classes(weight: float) -> str:
    return f"version: 1\npriority_classes:\n  best: {{rank: 2, weight: {weight}}}\n"


@pytest.mark.parametrize("weight", [MAX_WEIGHT * 2, 1e300])
def test_a_class_weighted_above_the_schedulers_bound_is_refused_where_it_is_written(weight: float) -> None:
    with pytest.raises(PolicyError) as refused:
        parse_policy(_classes(weight), source="p.yaml")
    error = refused.value
    assert (error.file, error.line, error.column) == ("p.yaml", 3, 27), error
    assert error.message.startswith("priority_classes.best.weight: "), error.message
    assert f"{MAX_WEIGHT}" in str(error), error


def test_a_class_weighted_at_the_bound_loads_and_builds_the_schedulers_class() -> None:
    policy = parse_policy(_classes(MAX_WEIGHT), source="p.yaml")
    declared = policy.document.priority_classes["best"]
    assert PriorityClass("best", declared.rank, declared.weight).weight == MAX_WEIGHT
