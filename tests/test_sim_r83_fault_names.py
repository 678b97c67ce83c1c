"""Review R83 of ``SimServer.fault``: a name it does not know.

``fault`` was a plain attribute: a misspelled fault (``"hnag"``, ``"timeout"``) was kept and
matched none of the server's checks, so the server answered as if healthy and a test of a
failing backend passed for the wrong reason. Setting a name not in ``FAULTS`` now raises
``InputError`` naming the known ones and leaves the fault as it was.
"""

from __future__ import annotations

import _http
import pytest

from agentgate.errors import InputError
from agentgate.sim import SimServer

KNOWN = ("none", "hang", "garbage", "error", "metrics_down")


@pytest.mark.parametrize("name", ["hnag", "timeout", "", "Error", None, 500])
def test_an_unknown_fault_is_refused_naming_the_known_ones(name: object) -> None:
    sim = SimServer(time_scale=0.01)
    sim.fault = "error"
    with pytest.raises(
        InputError, match="fault must be one of 'none', 'hang', 'garbage', 'error', 'metrics_down'"
    ):
        sim.fault = name  # type: ignore[assignment]
    assert sim.fault == "error"


@pytest.mark.parametrize("name", KNOWN)
def test_every_known_fault_is_taken(name: str) -> None:
    sim = SimServer(time_scale=0.01)
    sim.fault = name  # type: ignore[assignment]
    assert sim.fault == name


def test_a_known_fault_still_plays() -> None:
    with SimServer(time_scale=0.01) as sim:
        sim.fault = "metrics_down"
        assert _http.get(f"{sim.url}/metrics", timeout=10).status_code == 503
        sim.fault = "none"
        assert _http.get(f"{sim.url}/metrics", timeout=10).status_code == 200
