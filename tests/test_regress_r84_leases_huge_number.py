"""Review R84: a shared breaker's transition time of an integer too large for a float.

``SharedBreakers.publish`` read ``opened_at`` with ``math.isfinite``, which raises
``OverflowError`` on ``10**400``: a traceback where every other time that is not a finite number
is refused with ``InputError``. It now reads it with ``agentgate._numbers.finite``, as the rows it
reads back.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentgate.errors import InputError
from agentgate.store import open_store
from agentgate.store.leases import SharedBreakers


@pytest.mark.parametrize("opened_at", [10**400, -(10**400), float("inf")], ids=["10**400", "-10**400", "inf"])
def test_publish_refuses_a_time_past_a_floats_range(tmp_path: Path, opened_at: float) -> None:
    store = open_store(str(tmp_path / "agentgate.db"))
    try:
        with pytest.raises(InputError, match="transition time is a finite number"):
            SharedBreakers(store).publish("tool:t", "open", opened_at)
        assert SharedBreakers(store).read("tool:t") is None
    finally:
        store.close()
