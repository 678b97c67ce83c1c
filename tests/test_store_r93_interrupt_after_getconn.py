"""Review R93: a Ctrl-C (a ``KeyboardInterrupt`` a signal handler raises) landing in
``PostgresStore._connection`` just after ``pool.getconn()`` kept the connection from the pool for
good: ``getconn`` came before the ``try`` whose ``finally`` gives it back. After ``max_size`` such
interrupts every transaction waited out the pool's timeout and failed. It is taken inside the
``try`` now. The interrupt is delivered at that line by a trace function, as a signal handler
raises it between two lines."""

from __future__ import annotations

import inspect
import sys
from types import FrameType
from typing import Any

import pytest

from agentgate.store._postgres import PostgresStore

pytestmark = pytest.mark.postgres


def _line_after_getconn() -> tuple[Any, int]:
    """The code of ``PostgresStore._connection`` and its first line after ``pool.getconn()``."""
    function = inspect.unwrap(PostgresStore._connection)
    lines, first = inspect.getsourcelines(function)
    at = next(i for i, line in enumerate(lines) if "self.pool.getconn()" in line)
    return function.__code__, first + at + 1


def test_an_interrupt_just_after_getconn_gives_the_connection_back(postgres_url: str) -> None:
    store = PostgresStore(postgres_url, max_size=2, timeout_s=2)
    code, target = _line_after_getconn()
    armed = [True]

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        if frame.f_code is not code:
            return None

        def local(frame: FrameType, event: str, arg: object) -> Any:
            if event == "line" and frame.f_lineno == target and armed[0]:
                armed[0] = False
                raise KeyboardInterrupt("as a signal handler raises it")
            return local

        return local

    try:
        for _ in range(3):  # more than the pool holds
            armed[0] = True
            sys.settrace(tracer)
            try:
                with pytest.raises(KeyboardInterrupt), store.transaction() as tx:
                    tx.execute("SELECT 1")
            finally:
                sys.settrace(None)
            assert not armed[0], "the interrupt was not delivered where meant"
        with store.transaction() as tx:
            assert tx.execute("SELECT 1") == [(1,)]
        assert store._lent == 0
    finally:
        store.close()
