"""Review R87: ``Gate.close(timeout_s="5")`` marked the gate closing, then raised a bare
``TypeError`` adding the text to the clock: every later ``close()`` returned at once, so the
store was never closed and ``authorize`` went on writing allows. ``timeout_s`` is now read as
``SyncScheduler.close`` reads it, before anything changes: a value that is not a number (a bool,
text) or is NaN is refused with ``InputError``, the gate left open for a ``close`` that works;
None, infinity and an integer too large for a float wait until the calls settle (until R87 the
last raised ``OverflowError``, half-closed too).

Real components: a Gate on a SQLite file (``test_gate``'s policy)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from test_gate import Setup

from agentgate.capabilities import Call
from agentgate.errors import InputError, StoreError


@pytest.mark.parametrize("timeout_s", ["5", math.nan, True, [5]], ids=["text", "nan", "bool", "list"])
def test_a_timeout_that_is_not_a_number_is_refused_before_the_gate_closes(
    tmp_path: Path, timeout_s: object
) -> None:
    setup = Setup(tmp_path)
    with pytest.raises(
        InputError, match=r"Gate\.close: the drain timeout_s must be a number of seconds or None"
    ):
        setup.gate.close(timeout_s=timeout_s)  # type: ignore[arg-type]
    assert setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": "1"})).allowed  # still open
    setup.gate.close()
    with pytest.raises(StoreError, match="closed"):  # this close did close it
        setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": "2"}))


@pytest.mark.parametrize(
    "timeout_s", [None, math.inf, 10**400, -1, 0.5], ids=["none", "inf", "huge", "negative", "half"]
)
def test_a_timeout_without_bound_or_below_zero_closes_the_gate(
    tmp_path: Path, timeout_s: float | None
) -> None:
    setup = Setup(tmp_path)
    auth = setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": "1"}))
    assert setup.gate.run(auth, lambda: "found") == "found"
    setup.gate.close(timeout_s=timeout_s)
    with pytest.raises(StoreError, match="closed"):
        setup.gate.authorize(setup.agent, Call.tool("lookup", {"id": "2"}))
