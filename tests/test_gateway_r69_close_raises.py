"""Review R69 (lead, from the r69-revobspg reviewer's note): the gateway's pump closes the
backend's stream (``aclose``) before it settles the call; when that close raised (a backend
stream whose cleanup fails, met when the caller went away mid-stream), the exception left the
pump before the outcome was queued: no ``outcome`` entry, the reservation held until settled by
hand. The outcome is now settled whatever the close does, and a close's failure is the call's
error when nothing else failed. Real GatewayGate, real SQLite store."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from _raw_sqlite import opened
from test_gateway_authority import chat_allowed

from agentgate.dispatch import ChatChunk


def _outcomes(path: Path) -> list[str]:
    with opened(path) as db:
        rows = db.execute("SELECT CAST(entry AS TEXT) FROM audit_log").fetchall()
    return [row[0] for row in rows if '"kind":"outcome"' in row[0]]


def _run(tmp_path: Path, backend: AsyncIterator[ChatChunk], *, leave_early: bool) -> list[str]:
    db = tmp_path / "agentgate.db"
    with chat_allowed(db) as (gate, auth):

        async def read() -> None:
            stream = gate.gated_stream(auth, backend)
            try:
                async for _ in stream:
                    if leave_early:
                        break
            finally:
                await stream.aclose()  # type: ignore[attr-defined]

        asyncio.run(read())
        gate.flush()
    return _outcomes(db)


async def _cleanup_fails() -> AsyncIterator[ChatChunk]:
    # More chunks than the pump keeps ahead of its caller (``STREAM_AHEAD``): the caller that
    # leaves finds the pump waiting to hand one on, the stream suspended at a ``yield``, and the
    # pump's close of it raises there.
    try:
        for _ in range(10_000):
            yield ChatChunk("hi")
    finally:
        raise RuntimeError("the backend's stream could not be closed")


def test_a_caller_leaving_a_stream_whose_close_raises_still_settles_the_call(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Review R69: before, no outcome entry was written (the close's RuntimeError left the pump
    first, and reached the caller that had left), and the call's reservation stayed held. Now
    the call is settled as cut, and the close's failure is logged."""
    with caplog.at_level(logging.WARNING, logger="agentgate.dispatch.gateway._app"):
        outcomes = _run(tmp_path, _cleanup_fails(), leave_early=True)
    assert len(outcomes) == 1, outcomes
    assert '"status":"error"' in outcomes[0]
    assert [r.getMessage() for r in caplog.records if "closing the backend stream" in r.getMessage()] == [
        "agentgate gateway: closing the backend stream of model:m failed: "
        "the backend's stream could not be closed"
    ]


def test_a_stream_read_to_its_end_is_settled_ok(tmp_path: Path) -> None:
    """Review R69: the guard: a stream read whole settles ``ok``, once."""

    async def whole() -> AsyncIterator[ChatChunk]:
        yield ChatChunk("hi", finish_reason="stop")

    outcomes = _run(tmp_path, whole(), leave_early=False)
    assert len(outcomes) == 1, outcomes
    assert '"status":"ok"' in outcomes[0]
