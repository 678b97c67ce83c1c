"""A regression review of R89: ``Timeouts`` takes the least decode rate ``agentgate serve`` does.

Review R89 refused ``--decode-tokens-per-s`` under 0.001 (``1e-320`` made a stream's deadline
infinite), but only on the command line: ``Timeouts``, which ``Dispatcher``, ``BackendClient``
and ``Gateway`` take, still took ``1e-320`` (``stream_s`` infinite) or ``1e-300`` (``stream_s``
about 1e302 s), and a stream's bound in all never fired. ``Timeouts`` now refuses a rate under
``LEAST_DECODE_RATE`` (``InputError`` naming the field), the one constant the flag reads too.
"""

from __future__ import annotations

import argparse
import math

import pytest

from agentgate.cli import serve
from agentgate.dispatch._answers import MAX_USAGE_TOKENS
from agentgate.dispatch.backends import Timeouts
from agentgate.errors import InputError


@pytest.mark.parametrize("rate", [1e-320, 1e-300, 1e-9, 0.000999])
def test_a_decode_rate_under_the_least_is_refused_naming_the_field(rate: float) -> None:
    with pytest.raises(
        InputError, match=r"^timeout decode_tokens_per_s must be at least 0\.001 tokens a second"
    ):
        Timeouts(decode_tokens_per_s=rate)


def test_the_least_rate_is_taken_and_keeps_a_streams_deadline_finite() -> None:
    timeouts = Timeouts(first_token_s=86400.0, decode_tokens_per_s=0.001)
    deadline = timeouts.stream_s({"max_tokens": MAX_USAGE_TOKENS})
    assert math.isfinite(deadline) and deadline < 2e12  # 10**9 tokens at 0.001 a second, and a day


def test_the_library_and_the_serve_flag_refuse_at_the_same_rate() -> None:
    least = serve.LEAST_DECODE_RATE
    assert Timeouts(decode_tokens_per_s=least).decode_tokens_per_s == serve._decode_rate(f"{least!r}")
    below = least * 0.999
    with pytest.raises(InputError, match="decode_tokens_per_s"):
        Timeouts(decode_tokens_per_s=below)
    with pytest.raises(argparse.ArgumentTypeError, match="a decode rate"):
        serve._decode_rate(f"{below!r}")
