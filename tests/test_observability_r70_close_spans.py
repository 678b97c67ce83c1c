"""Review R70: ``Gate.close`` whose last commit of outcomes raised something that is not an
agentgate error (Ctrl-C, a ``SystemExit`` from a SIGTERM handler, an error nobody foresaw) left
the spans of the calls whose outcomes it could not write unended, never exported, and the store
open. Every such span now ends, ERROR, saying why its outcome was not written, and the error
still leaves ``close``."""

from __future__ import annotations

import _thread
import threading
from pathlib import Path

import pytest
from _raw_sqlite import opened
from opentelemetry.trace import StatusCode
from test_observability import Sweep

from agentgate.capabilities import Call
from agentgate.errors import StoreError

# On the gate's own thread (the background commit) the settlement is refused, a store error, kept
# and tried again; on the main thread (the flush at close) it is interrupted as by Ctrl-C: SQLite
# calls ``_thread.interrupt_main`` itself (no Python frame of its own to swallow it), and the
# KeyboardInterrupt is raised as the statement returns to the store's code.
CTRL_C_AT_CLOSE = """
CREATE TRIGGER ctrl_c_at_close BEFORE UPDATE ON budget_reservations
BEGIN SELECT CASE WHEN on_main_thread() THEN ctrl_c() ELSE RAISE(ABORT, 'not yet') END; END;
CREATE TRIGGER ctrl_c_at_close_release BEFORE DELETE ON budget_reservations
BEGIN SELECT CASE WHEN on_main_thread() THEN ctrl_c() ELSE RAISE(ABORT, 'not yet') END; END;
"""


def _on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def test_ctrl_c_in_the_flush_at_close_still_ends_every_call_span(
    tmp_path: Path, default_sigint: None
) -> None:
    """Review R70: Ctrl-C during ``close``'s last commit of outcomes left the call's span unended
    (it waited for an outcome nothing would write) and the store open. The span now ends, ERROR,
    ``agentgate.outcome.lost=true``, its status naming the interruption; ``close`` still raises
    ``KeyboardInterrupt`` and the store is closed."""
    sweep = Sweep(tmp_path)
    with opened(tmp_path / "agentgate.db") as db:
        db.executescript(CTRL_C_AT_CLOSE)
    for conn in list(sweep.gate.store._made):  # type: ignore[attr-defined]
        conn.create_function("on_main_thread", 0, _on_main_thread)
        conn.create_function("ctrl_c", 0, _thread.interrupt_main)
    auth = sweep.gate.authorize(sweep.boss, Call.model("scripted", {}), tokens=(10, 10))
    assert auth.allowed and auth.reservations
    sweep.gate.run(auth, lambda: "answer")
    with pytest.raises(KeyboardInterrupt):
        sweep.gate.close()
    spans = [s for s in sweep.exporter.get_finished_spans() if s.name == "chat scripted"]
    assert len(spans) == 1, [s.name for s in sweep.exporter.get_finished_spans()]
    (span,) = spans
    attributes = dict(span.attributes or {})
    assert attributes["agentgate.outcome.lost"] is True and "agentgate.outcome" not in attributes
    assert attributes["error.type"] == "KeyboardInterrupt"
    assert span.status.status_code == StatusCode.ERROR
    assert span.status.description == "outcome not recorded: KeyboardInterrupt"
    with pytest.raises(StoreError, match="closed"):
        sweep.gate.store.query("SELECT 1")
