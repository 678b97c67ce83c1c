"""Review R88: AGENTGATE_OPENAI_TIMEOUT and AGENTGATE_OPENAI_MAX_RETRIES are read as ASCII digits
(the timeout with a decimal point where it wants one), as the command line reads ``--limit`` and
``--older-than`` seconds. ``int`` and ``float`` had read ``1_0`` as 10, an Arabic-Indic digit as
its value and `` 2`` as 2: spellings agentgate refuses everywhere else. Each now ends the example
with one line and status 2, before any model call, as the documented bad values do. The examples
run in this process, as tests/test_examples_r59_endpoint.py runs them."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from test_examples_r58_endpoint import _completion
from test_examples_r59_endpoint import Endpoint, _unwrapped
from test_examples_r59_endpoint import _no_endpoint_settings as _no_endpoint_settings  # autouse
from test_examples_r59_endpoint import run as run  # the fixture

ARABIC_INDIC_THREE = "\u0663"


@pytest.mark.parametrize(
    ("setting", "value", "says"),
    [
        ("MAX_RETRIES", "1_0", "a whole number from 0 to 100"),
        ("MAX_RETRIES", ARABIC_INDIC_THREE, "a whole number from 0 to 100"),
        ("MAX_RETRIES", " 2", "a whole number from 0 to 100"),
        ("MAX_RETRIES", "2\n", "a whole number from 0 to 100"),
        ("MAX_RETRIES", "+2", "a whole number from 0 to 100"),
        ("TIMEOUT", "1_0", "a number of seconds above 0, at most 86400 (a day)"),
        ("TIMEOUT", ARABIC_INDIC_THREE, "a number of seconds above 0, at most 86400 (a day)"),
        ("TIMEOUT", " 60", "a number of seconds above 0, at most 86400 (a day)"),
        ("TIMEOUT", "6e1", "a number of seconds above 0, at most 86400 (a day)"),
        ("TIMEOUT", "+60", "a number of seconds above 0, at most 86400 (a day)"),
    ],
)
def test_a_number_spelled_as_agentgate_refuses_it_ends_with_one_line_and_status_2(
    setting: str, value: str, says: str, run: Callable[..., tuple[int, str]]
) -> None:
    """Review R88: ``1_0`` retries were 10, an Arabic-Indic 3 was 3, a padded `` 2`` was 2."""
    with Endpoint(lambda n, request: _completion("unused")) as endpoint:
        status, out = run("support_agent.py", endpoint, **{setting: value})
    assert status == 2, out[-3000:]
    assert out.splitlines() == [f"AGENTGATE_OPENAI_{setting}={value!r} is not {says}"]
    assert not endpoint.requests


def test_ascii_digits_with_a_decimal_point_and_leading_zeros_are_taken(
    run: Callable[..., tuple[int, str]],
) -> None:
    """Review R88: the spellings the command line reads still run (``0.5`` s, ``002`` retries)."""
    with Endpoint(lambda n, request: _completion("Nothing to refund.")) as endpoint:
        status, out = run("support_agent.py", endpoint, TIMEOUT="30.5", MAX_RETRIES="002")
    assert status == 0, out[-3000:]
    assert "timeout 30.5 s, max retries 2" in _unwrapped(out), out[-3000:]
