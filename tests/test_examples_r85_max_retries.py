"""Review R85: AGENTGATE_OPENAI_MAX_RETRIES takes at most 100 retries; more ends the example with
one line and status 2, before any model call, as the other settings do. The examples run in this
process, as tests/test_examples_r59_endpoint.py runs them."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from test_examples_r58_endpoint import _completion
from test_examples_r59_endpoint import Endpoint, _unwrapped
from test_examples_r59_endpoint import _no_endpoint_settings as _no_endpoint_settings  # autouse
from test_examples_r59_endpoint import run as run  # the fixture


@pytest.mark.parametrize("value", ["101", "99999999999999999999999"])
def test_more_retries_than_100_end_with_one_line_and_status_2(
    value: str, run: Callable[..., tuple[int, str]]
) -> None:
    """Review R85: any whole number was taken, so that an endpoint nobody listens at was retried for good."""
    with Endpoint(lambda n, request: _completion("unused")) as endpoint:
        status, out = run("support_agent.py", endpoint, MAX_RETRIES=value)
    assert status == 2, out[-3000:]
    assert out.splitlines() == [f"AGENTGATE_OPENAI_MAX_RETRIES={value!r} is not a whole number from 0 to 100"]
    assert not endpoint.requests


def test_100_retries_are_taken(run: Callable[..., tuple[int, str]]) -> None:
    """Review R85: the bound itself is taken."""
    with Endpoint(lambda n, request: _completion("Nothing to refund.")) as endpoint:
        status, out = run("support_agent.py", endpoint, MAX_RETRIES="100")
    assert status == 0, out[-3000:]
    assert "max retries 100" in _unwrapped(out), out[-3000:]
