"""Regression review of R91 (item 3): the R91 handlers of ``GatedBroker.submit`` closed an
interrupted allow (``_abandon``, ``_end``) and then re-raised the interrupt, but a store that
refused that clean-up raised its ``StoreError`` in the interrupt's place. A Ctrl-C is often
pressed at a store that hangs or fails, and a caller that retries on ``StoreError`` then swallowed
it. The same held for the renewal's link (``GatedBroker.renew``). Now the interrupt is raised,
the store's error logged and chained to it; an ordinary error keeps the clean-up's error as
before."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_broker_restart_budget import World

from agentgate.dispatch.broker import GangRequest
from agentgate.errors import StoreError


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    made = World(f"sqlite:///{tmp_path / 'agentgate.db'}")
    yield made
    made.process.gate.close()


def _store_down_then(world: World, raised: BaseException) -> object:
    """A stand-in that takes the store down (every transaction refused) and raises ``raised``."""
    store = world.process.gate.store

    def refused(*args: object, **kwargs: object) -> object:
        raise StoreError("database is locked")

    def interrupted(*args: object, **kwargs: object) -> object:
        store.transaction = refused  # type: ignore[method-assign]
        raise raised

    return interrupted


def _interrupt_at(world: World, where: str, raised: BaseException) -> None:
    if where == "link":
        world.process.gated.decisions.add = _store_down_then(world, raised)  # type: ignore[method-assign]
    elif where == "submit":
        world.process.broker.submit = _store_down_then(world, raised)  # type: ignore[method-assign]
    else:
        world.process.broker.renew = _store_down_then(world, raised)  # type: ignore[method-assign]


@pytest.mark.parametrize("where", ["link", "submit", "renew"])
@pytest.mark.parametrize("interrupt", [KeyboardInterrupt(), SystemExit(1)], ids=["ctrl-c", "exit"])
def test_an_interrupt_survives_a_clean_up_the_store_refuses(
    world: World, where: str, interrupt: BaseException, caplog: pytest.LogCaptureFixture
) -> None:
    process = world.process
    if where == "renew":
        process.gated.submit(world.trainer, GangRequest("job1", "x", 2, gpu_type="H100"))
    real = process.gate.store.transaction
    _interrupt_at(world, where, interrupt)
    with caplog.at_level(logging.ERROR, logger="agentgate.broker"), pytest.raises(type(interrupt)) as raised:
        if where == "renew":
            process.gated.renew(world.trainer, "job1")
        else:
            process.gated.submit(world.trainer, GangRequest("job1", "x", 2, gpu_type="H100"))
    process.gate.store.transaction = real  # type: ignore[method-assign]
    assert isinstance(raised.value.__cause__, StoreError)  # chained, not in its place
    assert f"interrupted ({type(interrupt).__name__})" in caplog.text
    assert "database is locked" in caplog.text


def test_an_ordinary_error_still_gives_way_to_the_clean_ups_store_error(world: World) -> None:
    _interrupt_at(world, "submit", RuntimeError("broker bug"))
    with pytest.raises(StoreError, match="database is locked") as raised:
        world.process.gated.submit(world.trainer, GangRequest("job1", "x", 2, gpu_type="H100"))
    assert isinstance(raised.value.__context__, RuntimeError)
