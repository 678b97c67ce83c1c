"""What the benchmarks' command lines take: argparse types that refuse, with one line, a count or a
load a benchmark cannot run (not a benchmark: ``make bench`` skips files named ``_*``)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from agentgate._shown import quoted

MAX_DIGITS = 4300
"""The most digits ``int`` reads (Python's ``sys.get_int_max_str_digits()`` default)."""


def _whole(text: str, minimum: int, refusal: str) -> int:
    """``text`` as a whole number of at least ``minimum``; ``refusal`` says why one below is not.

    A whole number is ASCII digits, with a sign or not, spaces around it read off: other
    scripts' digits (``\u0663``) and ``_`` between digits (``1_000``), which ``int`` reads, are
    refused, as the command line refuses them (docs/cli.md); until review R88d they were read,
    and past 4,300 of them refused as "not a whole number" whatever they said. Leading zeros are
    read off first, however many there are, as the examples read a count
    (``examples/_common.py``): until review R88c ``int`` refused ``--backends`` of 4,400 zeros
    then 8 as "not a whole number". One of more than ``MAX_DIGITS`` digits that count is refused
    as too large (as below ``minimum``, which is never negative, when it is), not as no number."""
    body = text.strip()
    sign = body[:1] if body.startswith(("+", "-")) else ""
    digits = body[len(sign) :]
    if not (digits.isascii() and digits.isdigit()):
        if any(c.isdigit() for c in digits) and all(c.isdigit() or c == "_" for c in digits):
            raise argparse.ArgumentTypeError(
                f"not a whole number in ASCII digits (0-9, no '_'): {quoted(text, 60)}"
            )
        raise argparse.ArgumentTypeError(f"not a whole number: {quoted(text, 60)}")
    digits = digits.lstrip("0") or "0"
    if len(digits) > MAX_DIGITS:
        # Below every ``minimum`` taken (each is 0 or more) when negative, above any count else.
        if sign == "-":
            raise argparse.ArgumentTypeError(f"{refusal}: {quoted(text, 60)}")
        raise argparse.ArgumentTypeError(
            f"too large: a whole number of {len(digits):,} digits: {quoted(text, 60)}"
        )
    value = int(sign + digits)
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{refusal}: {quoted(text, 60)}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: a whole number above zero."""
    return _whole(text, 1, "must be at least 1")


def _number(text: str) -> float:
    """``text`` read as a float (``inf`` and ``nan`` included, for the caller to judge)."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None


def positive(text: str) -> float:
    """An argparse type: a finite number above zero."""
    value = _number(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number above 0: {text!r}")
    return value


def slowdown(text: str) -> float:
    """An argparse type: how many times slower, a finite number of 1 or more (1: as fast). Until
    review R87 ``broker.py --spread-slowdown`` took any number above 0, and at 0.1 a gang placed
    across domains ran ten times faster: more useful GPU-seconds than held (utilization above
    occupancy), and a goal line built on them."""
    value = _number(text)
    if not (math.isfinite(value) and value >= 1):
        raise argparse.ArgumentTypeError(f"must be a finite number of 1 or more (times slower): {text!r}")
    return value


MIN_LOAD = 0.001
"""The least offered load (``--load``, a fraction of what the simulated pool or cluster can
serve) a benchmark takes: a thousandth of capacity is idle. Until review R85 any finite number
above 0 was taken, and ``dispatch.py --load 1e-6`` scaled a trace's arrivals to times its replay
did not reach."""


def offered_load(maximum: float) -> Callable[[str], float]:
    """An argparse type: an offered load from ``MIN_LOAD`` to ``maximum`` times capacity (until
    review R85 ``broker.py --load 1e6`` drew about 3e8 jobs into memory before simulating any)."""

    def load(text: str) -> float:
        value = _number(text)
        if not MIN_LOAD <= value <= maximum:
            raise argparse.ArgumentTypeError(
                f"must be an offered load from {MIN_LOAD:g} to {maximum:g} (times capacity): {text!r}"
            )
        return value

    return load


def whole_up_to(minimum: int, maximum: int, bound: str) -> Callable[[str], int]:
    """An argparse type: a whole number from ``minimum`` to ``maximum``; ``bound`` says, in the
    refusal, why none above. Until review R88 a count with no upper bound (``broker.py
    --max-draining``, ``dispatch.py --backends``) took any number of digits, and one too big for a
    float ended the run in a traceback once it reached it."""

    def whole(text: str) -> int:
        refusal = f"must be {minimum:,} or more and {maximum:,} or less ({bound})"
        value = _whole(text, minimum, refusal)
        if value > maximum:
            raise argparse.ArgumentTypeError(f"{refusal}: {quoted(text, 60)}")
        return value

    return whole


def random_seed(text: str) -> int:
    """An argparse type: a seed, a whole number 0 or more. ``random.Random`` seeds with the
    absolute value, so until review R85 ``--seed -1`` replayed seed 1's draw under the label -1."""
    return _whole(text, 0, "must be a whole number 0 or more (random.Random reads -N as N)")


def wait_s(text: str) -> float:
    """An argparse type: seconds to wait, zero or more; ``inf`` for never (not NaN)."""
    value = _number(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds (inf: never): {text!r}")
    return value
