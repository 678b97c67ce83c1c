"""Review R88b: AGENTGATE_OPENAI_MAX_RETRIES with thousands of leading zeros is read by its digits
after the zeros, as ``002`` is. The length check left the zeros out, but ``int`` still read them
and refused a text past 4,300 digits with a bare ValueError and a traceback. The examples run in
this process, as tests/test_examples_r59_endpoint.py runs them."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from test_examples_r58_endpoint import _completion
from test_examples_r59_endpoint import Endpoint, _unwrapped
from test_examples_r59_endpoint import _no_endpoint_settings as _no_endpoint_settings  # autouse
from test_examples_r59_endpoint import run as run  # the fixture


@pytest.mark.parametrize(("value", "read"), [("0" * 4300 + "2", 2), ("0" * 5000, 0)])
def test_retries_with_thousands_of_leading_zeros_are_read_as_their_digits(
    value: str, read: int, run: Callable[..., tuple[int, str]]
) -> None:
    """Review R88b: 4,300 zeros then ``2`` raised ValueError from ``int`` instead of being 2 retries."""
    with Endpoint(lambda n, request: _completion("Nothing to refund.")) as endpoint:
        status, out = run("support_agent.py", endpoint, MAX_RETRIES=value)
    assert status == 0, out[-3000:]
    assert f"max retries {read}" in _unwrapped(out), out[-3000:]


def test_thousands_of_leading_zeros_before_too_many_retries_still_end_with_status_2(
    run: Callable[..., tuple[int, str]],
) -> None:
    """Review R88b: the zeros are read off, not the bound: 101 after them is still refused."""
    value = "0" * 4300 + "101"
    with Endpoint(lambda n, request: _completion("unused")) as endpoint:
        status, out = run("support_agent.py", endpoint, MAX_RETRIES=value)
    assert status == 2, out[-3000:]
    assert out.splitlines() == [f"AGENTGATE_OPENAI_MAX_RETRIES={value!r} is not a whole number from 0 to 100"]
    assert not endpoint.requests
