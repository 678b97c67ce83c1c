"""docs/gateway.md bounds how long ``agentgate serve`` takes to stop with every term it waits for
(review R93): a decision under way when the gateway stops is waited for, and it may wait up to the
store's busy timeout for a store another process holds locked (a scratch run: 12.6 s to stop with
``--shutdown-grace-s 1``). Until then the bound and the kill-timeout advice left that term out, so
a service manager sized to them could kill the process before the decision's outcome was recorded.
"""

from __future__ import annotations

import re
from pathlib import Path

GATEWAY_DOC = (Path(__file__).resolve().parents[1] / "docs" / "gateway.md").read_text()


def _unwrapped(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_the_stop_bound_counts_a_decision_waiting_for_the_store() -> None:
    text = _unwrapped(GATEWAY_DOC)
    bound = text[text.index("Stopping thus takes at most") :]
    bound = bound[: bound.index("A second Ctrl-C")]
    assert "busy timeout" in bound and "AGENTGATE_SQLITE_BUSY_TIMEOUT" in bound, bound


def test_the_kill_timeout_advice_counts_the_busy_timeout() -> None:
    text = _unwrapped(GATEWAY_DOC)
    flag = text[text.index("- `--shutdown-grace-s`:") :]
    flag = flag[: flag.index("- `--first-token-s`")]
    assert "kill timeout" in flag and "busy timeout" in flag, flag
