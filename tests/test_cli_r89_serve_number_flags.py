"""Review R89: ``agentgate serve`` read its number flags with Python's ``int`` and ``float``,
unlike every other verb: ``--max-body-bytes 1_000``, ``--port 8_001``, full-width digits,
``--stream-stall-s 1e3`` and `` 5`` were taken, and ``--decode-tokens-per-s 1e-320`` passed the
"positive finite" check but made a stream's deadline infinite. They now take ASCII digits alone
(a fraction where seconds or a rate may have one, leading zeros read off), and a decode rate of at
least 0.001 tokens a second (``LEAST_DECODE_RATE``); anything else is exit 2, one line naming the flag."""

from __future__ import annotations

import argparse
import math

import pytest

from agentgate._http_limits import MOST_SECONDS
from agentgate.cli.main import main
from agentgate.cli.serve import _decode_rate, _grace, _max_body, _port
from agentgate.dispatch._answers import MAX_USAGE_TOKENS
from agentgate.dispatch.backends import Timeouts

_FLAGS = ["--port", "--max-body-bytes", "--max-head-bytes", "--shutdown-grace-s", "--stream-stall-s",
          "--first-token-s", "--decode-tokens-per-s"]  # fmt: skip
_NOT_ASCII_DIGITS = ["1_000", "２０４８", "٢٠٤٨", " 2048", "2048 ", "+2048", "0x800", "2e3", "inf", "nan", ""]


@pytest.mark.parametrize("value", _NOT_ASCII_DIGITS)
@pytest.mark.parametrize("flag", _FLAGS)
def test_a_number_not_in_ascii_digits_is_refused_naming_the_flag(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--policy", "p.yaml", "--inventory", "i.yaml", flag, value])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("agentgate: error: ")]
    assert exited.value.code == 2 and len(lines) == 1 and f"argument {flag}: expected " in lines[0], err


def test_leading_zeros_are_read_off() -> None:
    assert _port("0" * 5000 + "8002") == 8002
    assert _grace("010") == 10
    assert _max_body("0001000") == 1000
    assert _decode_rate("005.50") == 5.5


def test_a_number_of_any_length_is_out_of_range_not_malformed() -> None:
    for parse, text in ((_port, "9" * 5000), (_max_body, "9" * 5000), (_decode_rate, "9" * 400)):
        with pytest.raises(argparse.ArgumentTypeError, match=r", not 9{40}\.\.\.$"):
            parse(text)


@pytest.mark.parametrize("rate", ["0.0009", "0." + "0" * 319 + "1"])
def test_a_decode_rate_too_slow_for_a_finite_deadline_is_refused(rate: str) -> None:
    with pytest.raises(
        Exception, match=r"a decode rate is a finite number of tokens a second, at least 0\.001"
    ):
        _decode_rate(rate)


def test_the_slowest_rate_taken_keeps_every_deadline_finite() -> None:
    timeouts = Timeouts(first_token_s=MOST_SECONDS, decode_tokens_per_s=_decode_rate("0.001"))
    payload = {"max_tokens": MAX_USAGE_TOKENS}
    assert math.isfinite(timeouts.stream_s(payload)) and timeouts.stream_s(payload) < 1e13
