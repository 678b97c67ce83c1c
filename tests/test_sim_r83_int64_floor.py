"""Review R83 of ``agentgate._json.integral``: the lower end of a 64-bit integer's range.

A whole float is read as the integer it is within a 64-bit integer's range, but the bound was
``abs(value) < 2**63``, which left out -2**63: the simulated backend took ``"seed":
-9223372036854775808`` and refused the same integer written as a float with a 400. The range is
now the integer one, ``-2**63 <= value < 2**63``. The other readers of ``integral`` (the
dispatcher's and the LangGraph middleware's token counts) refuse a negative count by their own
check, as before.
"""

from __future__ import annotations

import pytest

from agentgate._json import integral
from agentgate.dispatch._answers import _whole_tokens
from agentgate.errors import DispatchError, InputError
from agentgate.sim._request import parse_chat

_MESSAGES = b'"messages":[{"role":"user","content":"hi"}]'


@pytest.mark.parametrize(
    "seed", [b"-9223372036854775808", b"-9223372036854775808.0", b"-9.223372036854775808e18"]
)
def test_the_lowest_64_bit_seed_is_taken_however_it_is_written(seed: bytes) -> None:
    """Review R83: the two float spellings were a 400 ("seed: Input should be a valid integer")."""
    chat = parse_chat(b"{" + _MESSAGES + b',"seed":' + seed + b"}", 131072)
    assert chat.prompt_tokens > 0


@pytest.mark.parametrize(
    "seed", [b"9223372036854775808", b"9223372036854775808.0", b"-9223372036854777856.0"]
)
def test_a_seed_past_64_bits_is_still_refused(seed: bytes) -> None:
    with pytest.raises(InputError, match=r"^seed: "):
        parse_chat(b"{" + _MESSAGES + b',"seed":' + seed + b"}", 131072)


def test_integral_reads_a_whole_float_over_the_whole_64_bit_range() -> None:
    assert integral(-(2.0**63)) == -(2**63) and type(integral(-(2.0**63))) is int
    assert integral(2.0**63 - 1024) == 2**63 - 1024
    assert type(integral(2.0**63)) is float  # 2**63 is past the range, as before
    assert type(integral(-(2.0**63) - 2048)) is float


def test_a_negative_token_count_is_still_refused_by_the_dispatcher() -> None:
    with pytest.raises(DispatchError, match="max_tokens must be a whole number from 0"):
        _whole_tokens("max_tokens", -(2.0**63))
