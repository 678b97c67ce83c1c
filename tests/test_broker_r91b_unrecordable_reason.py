"""Regression review (b) of R91 (minor item): an error before the broker took a request, whose
text held a lone surrogate, was quoted as is in the ``error`` outcome that closes the allow; the
audit log refused that text (``InputError``, raised in place of the error), and the allow stayed
open with its reservation held for ever. Now an outcome's reason is written as the log can hold
it, the surrogate escaped."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_broker_restart_budget import World

from agentgate.dispatch.broker import GangRequest


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = World(f"sqlite:///{tmp_path / 'agentgate.db'}", budget=10_000_000)
    yield made
    made.process.gate.close()


def test_an_error_whose_text_is_not_unicode_still_closes_the_allow(world: World) -> None:
    process = world.process

    def failing(request: GangRequest, **kwargs: object) -> object:
        raise RuntimeError("bad \ud800 text")

    process.broker.submit = failing  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="bad"):
        process.gated.submit(world.trainer, GangRequest("job1", "x", 4, gpu_type="H100"))
    allow = next(e for e in process.entries() if e.kind == "allow")
    closed = [e for e in process.entries() if e.kind == "outcome"]
    assert [(e.status, e.ref, list(e.reasons)) for e in closed] == [
        ("error", allow.index, ["bad \\ud800 text"])
    ]
    assert process.gated.decisions.get("job1") is None
    assert world.remaining() == world.budget  # its reservation returned
