"""Review R89: a ``Retry-After`` of delta-seconds with leading zeros (``1*DIGIT``, RFC 9110
10.2.3: ``0000000001`` is 1 s) was read as ``MAX_RETRY_AFTER_S`` (300 s) once it had 10
characters or more, whatever its value: the backend that asked for 1 s (or 0 s), and every alias
of its URL, was held down 5 minutes, and its callers told to wait that long. The zeros are now
dropped before the digits are measured, as ``Content-Length``'s are (review R88)."""

from __future__ import annotations

import pytest

from agentgate.dispatch.backends import MAX_RETRY_AFTER_S, retry_after_s


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("0000000001", 1.0),
        ("0000000000", 0.0),
        ("00000000000000000000005", 5.0),
        ("0" * 5000 + "42", 42.0),
        (" 0000000000120 ", 120.0),
        ("0000000000086400", MAX_RETRY_AFTER_S),
        ("0" * 10 + "9" * 5000, MAX_RETRY_AFTER_S),
    ],
)
def test_leading_zeros_do_not_change_the_seconds_asked(value: str, seconds: float) -> None:
    assert retry_after_s(value) == seconds
