"""``agentgate tasks settle`` reads the call's ``allow`` entry in its own transaction.

Until the session after review R94 ``store.once.settle`` took the audit append lock in its
transaction, then read the allow entry with ``audit.entry(index)``: on a second pooled connection
(review R95's secondconn), holding the lock, and every Gate's decisions, while that read waited,
and explaining a missing entry from another snapshot than the transaction's. The store here
refuses any statement on another connection while one of its transactions is open in the thread.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from test_store_r63b_once_rows import Opener, _allowed_and_never_finished, _key, _log, opener  # noqa: F401

from agentgate.store import Store
from agentgate.store.once import settle


class _OneConnectionAtATime:
    """Wraps ``store``: a ``query`` or ``transaction`` begun while one of its transactions is open
    in the same thread fails the test (it would take a second connection)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.open = threading.local()

    def __getattr__(self, name: str) -> Any:  # dialect, url, ...: the store's own
        return getattr(self.store, name)

    def _refuse_nested(self, what: str) -> None:
        if getattr(self.open, "depth", 0):
            raise AssertionError(f"{what} on another connection inside an open transaction")

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        self._refuse_nested(f"query {sql[:60]!r}")
        return self.store.query(sql, params)

    @contextlib.contextmanager
    def transaction(self, **kwargs: Any) -> Iterator[Any]:
        self._refuse_nested("a transaction")
        with self.store.transaction(**kwargs) as tx:
            self.open.depth = 1
            try:
                yield tx
            finally:
                self.open.depth = 0


@pytest.mark.parametrize("edit", [None, "past-the-end"])
def test_settle_reads_the_allow_entry_in_its_own_transaction(opener: Opener, edit: str | None) -> None:  # noqa: F811
    _allowed_and_never_finished(opener)
    with contextlib.closing(opener()) as store:
        log, key = _log(store), _key(store)
        if edit:
            with store.transaction() as tx:
                tx.execute("UPDATE agentgate_once SET allow_index = ?", (log.size() + 3,))
        watched = _OneConnectionAtATime(store)
        log.store = watched  # type: ignore[assignment]
        try:
            if edit:
                with pytest.raises(Exception, match="its allow_index"):
                    settle(watched, log, key, ran=True, by="ops", min_age_s=0)  # type: ignore[arg-type]
            else:
                settle(watched, log, key, ran=True, by="ops", min_age_s=0)  # type: ignore[arg-type]
        finally:
            log.store = store
        assert store.query("SELECT state FROM agentgate_once") == [("started",) if edit else ("ok",)]
