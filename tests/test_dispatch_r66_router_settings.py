"""Review R66: the router's ``max_sessions`` setting is checked when the router is made."""

from __future__ import annotations

import math

import pytest

from agentgate.dispatch import inventory_from_mapping
from agentgate.dispatch.router import Router, RouteRequest
from agentgate.errors import InputError


def _router(**settings: object) -> Router:
    inventory = inventory_from_mapping(
        {"backends": [{"name": "b0", "url": "http://127.0.0.1:9000", "models": ["m"]}]}
    )
    return Router(inventory, **settings)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["100", 1.5, math.nan, math.inf, -1, True, None])
def test_a_max_sessions_that_is_no_whole_number_from_zero_is_an_input_error(value: object) -> None:
    """Review R66: ``max_sessions`` was taken unchecked: a string was a ``TypeError`` out of the
    first routed call with a session, NaN or inf kept every session for good (the bound on the
    affinity map gone), a negative one dropped each session as it was kept. Now ``InputError``
    naming the setting, when the router is made."""
    with pytest.raises(InputError, match="router max_sessions must be a whole number >= 0"):
        _router(max_sessions=value)


def test_max_sessions_zero_keeps_no_session() -> None:
    """Review R66: 0 is a setting (no affinity kept), not an error."""
    router = _router(max_sessions=0)
    plan = router.route(RouteRequest("r0", "m", 10, session="s"), 0.0)
    assert plan.action == "dispatch"
    assert len(router._sessions) == 0
