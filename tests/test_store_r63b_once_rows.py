"""A once-only call's row edited outside agentgate (agentgate/store/once.py) is refused as a
``StoreError`` naming the table, the call and the column, with nothing written, as
agentgate/store/held.py refuses a malformed reservation row (review R62): never a traceback,
never a reservation left held by a settlement that read the row wrong.

Until review R63 ``_record`` took ``reservations`` for a JSON list whatever it held: text that is
no JSON (or ``null``) was a ``JSONDecodeError`` (``TypeError``) traceback out of ``tasks unsettled``
and ``tasks settle``, and a JSON string or object was walked character by character (key by key):
``settle`` marked the call settled and left its real reservation held. And ``settle`` took
``allow_index`` for the call's ``allow`` entry whatever that entry was: edited to 0, it said
"allowed by audit entry 0" and wrote that entry's principal and resource into the outcome."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from test_gate_once import PAY, RUN, _policy_text

from agentgate.cli.main import main
from agentgate.errors import StoreError
from agentgate.gate import Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore, Store
from agentgate.store.audit import AuditLog, open_log_key
from agentgate.store.once import OnceCalls, settle

Opener = Callable[[], Store]


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    """Opens the same store anew each time it is called: a SQLite file, or a PostgreSQL database."""
    if request.param == "sqlite":
        path = tmp_path / "agentgate.db"
        yield lambda: SQLiteStore(path)
    else:
        from agentgate.store._postgres import PostgresStore

        url: str = request.getfixturevalue("postgres_url")
        yield lambda: PostgresStore(url)


def _allowed_and_never_finished(opener: Opener) -> str:
    """One once-only call allowed, its budget reserved, and no outcome (its worker died); the id
    of its reservation."""
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    with Gate(parse_policy(_policy_text(keys), source="once.yaml"), opener()) as gate:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        assert gate.authorize(agent, PAY, call_id="c1", run_id=RUN).allowed
        gate.flush()
    with contextlib.closing(opener()) as store:
        (reservations,) = store.query("SELECT reservations FROM agentgate_once")[0]
        (reservation,) = store.query("SELECT id FROM budget_reservations WHERE state = 'reserved'")[0]
    assert reservations == f'["{reservation}"]'
    return str(reservation)


def _edit(opener: Opener, column: str, value: object) -> None:
    with contextlib.closing(opener()) as store, store.transaction() as tx:
        tx.execute(f"UPDATE agentgate_once SET {column} = ?", (value,))


def _nothing_written(opener: Opener, reservation: str, log_size: int) -> None:
    with contextlib.closing(opener()) as store:
        assert store.query("SELECT state FROM agentgate_once") == [("started",)]
        assert store.query("SELECT state FROM budget_reservations WHERE id = ?", (reservation,)) == [
            ("reserved",)
        ]
        assert _log(store).size() == log_size


def _log_size(opener: Opener) -> int:
    with contextlib.closing(opener()) as store:
        return _log(store).size()


@pytest.mark.parametrize("stored", ["not json", "null", "7", "[1]", '[["a"]]'])
def test_reservations_that_are_no_list_of_ids_are_refused_naming_the_row(opener: Opener, stored: str) -> None:
    """Review R63: a once-only call whose ``reservations`` is not a JSON list of ids is refused
    by ``unsettled`` and ``settle`` as a ``StoreError`` naming the table, the call and the column,
    with nothing written (until now a JSONDecodeError or TypeError traceback)."""
    reservation = _allowed_and_never_finished(opener)
    _edit(opener, "reservations", stored)
    size = _log_size(opener)
    with contextlib.closing(opener()) as store:
        with pytest.raises(StoreError) as listed:
            OnceCalls(store).unsettled()
        with pytest.raises(StoreError) as settled:
            settle(store, _log(store), _key(store), ran=True, by="ops", min_age_s=0)
    for caught in (listed, settled):
        said = str(caught.value)
        assert said.startswith("agentgate_once: the row of call '") and "its reservations" in said, said
        assert len(said) < 400 and "\n" not in said
    _nothing_written(opener, reservation, size)


@pytest.mark.parametrize("shape", ["string", "object"])
def test_reservations_given_as_a_json_string_or_object_are_not_walked(opener: Opener, shape: str) -> None:
    """Review R63: a ``reservations`` edited into the JSON string of the real id (or an object
    keyed by it) was walked character by character (key by key): ``settle`` settled the call and
    left its real reservation held. Now refused, the call and the reservation as they were."""
    reservation = _allowed_and_never_finished(opener)
    _edit(opener, "reservations", f'"{reservation}"' if shape == "string" else f'{{"{reservation}": 1}}')
    size = _log_size(opener)
    with contextlib.closing(opener()) as store, pytest.raises(StoreError, match="its reservations"):
        settle(store, _log(store), _key(store), ran=False, by="ops", min_age_s=0)
    _nothing_written(opener, reservation, size)


def test_an_allow_index_naming_no_allow_entry_is_refused(opener: Opener) -> None:
    """Review R63: ``settle`` of a call whose ``allow_index`` was edited to name an entry that is
    not an ``allow`` (entry 0: the grant's issue) said "allowed by audit entry 0" and copied that
    entry's principal and resource into the outcome it wrote. Now a ``StoreError`` naming the row
    and the entry, nothing written."""
    reservation = _allowed_and_never_finished(opener)
    _edit(opener, "allow_index", 0)
    size = _log_size(opener)
    with contextlib.closing(opener()) as store, pytest.raises(StoreError) as caught:
        settle(store, _log(store), _key(store), ran=True, by="ops", min_age_s=0)
    said = str(caught.value)
    assert said.startswith("agentgate_once: the row of call '") and "its allow_index 0" in said, said
    _nothing_written(opener, reservation, size)


def test_an_allow_index_past_the_log_or_negative_is_refused(opener: Opener) -> None:
    """Review R63: an ``allow_index`` edited past the end of the log, or below 0, is the row's
    fault, said so (``StoreError`` naming the row), not the log's."""
    reservation = _allowed_and_never_finished(opener)
    size = _log_size(opener)
    for index in (size + 5, -1):
        _edit(opener, "allow_index", index)
        with contextlib.closing(opener()) as store, pytest.raises(StoreError, match="its allow_index"):
            settle(store, _log(store), _key(store), ran=True, by="ops", min_age_s=0)
    _nothing_written(opener, reservation, size)


def test_tasks_unsettled_and_settle_say_a_damaged_row_in_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R63: at the CLI a damaged once-only row is one line ``agentgate: error: ...``
    naming it, exit 2 (docs/cli.md, a damaged store), where both verbs printed a traceback, exit 1."""
    path = tmp_path / "agentgate.db"
    reservation = _allowed_and_never_finished(lambda: SQLiteStore(path))
    size = _log_size(lambda: SQLiteStore(path))
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("UPDATE agentgate_once SET reservations = 'not json'")
        db.commit()
        (key,) = db.execute("SELECT key FROM agentgate_once").fetchone()
    for argv in (["tasks", "unsettled"], ["tasks", "settle", key, "--ran", "--older-than", "0"]):
        capsys.readouterr()
        assert main([*argv, "--store", str(path)]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1, (out, err)
        assert err.startswith("agentgate: error: agentgate_once: the row of call '"), err
    _nothing_written(lambda: SQLiteStore(path), reservation, size)


def _log(store: Store) -> AuditLog:
    return AuditLog(store, open_log_key(store))


def _key(store: Store) -> str:
    return str(store.query("SELECT key FROM agentgate_once")[0][0])


def test_a_decision_on_a_call_whose_row_has_an_allow_index_of_text_fails_closed(tmp_path: Path) -> None:
    """Review R63: the Gate reads a once-only call's row (``OnceCalls.last``) when the same call
    is decided again; an ``allow_index`` edited to text (SQLite's INTEGER column keeps it) was a
    ``ValueError`` out of ``authorize``. Now a ``StoreError`` naming the row: refused, no allow
    recorded."""
    path = tmp_path / "agentgate.db"
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    with Gate(parse_policy(_policy_text(keys), source="once.yaml"), SQLiteStore(path)) as gate:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        assert gate.authorize(agent, PAY, call_id="c1", run_id=RUN).allowed
        gate.flush()
        _edit(lambda: SQLiteStore(path), "allow_index", "x")
        size = _log_size(lambda: SQLiteStore(path))
        with pytest.raises(
            StoreError, match=r"agentgate_once: the row of call '[0-9a-f]+' .*its allow_index"
        ):
            gate.authorize(agent, PAY, call_id="c1", run_id=RUN)
    assert _log_size(lambda: SQLiteStore(path)) == size


def test_tasks_unsettled_refuses_an_allow_index_naming_no_allow_of_a_tool_call(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R63 (r63b-rows's finding, the lead's fix): ``tasks unsettled`` showed whatever entry
    a row's ``allow_index`` named: edited to 0 (a grant's issue), the call was listed with that
    entry's resource, ``agent:...``. It checks each entry as ``tasks settle`` does: one line, exit 2."""
    path = tmp_path / "agentgate.db"
    _allowed_and_never_finished(lambda: SQLiteStore(path))
    _edit(lambda: SQLiteStore(path), "allow_index", 0)
    capsys.readouterr()
    assert main(["tasks", "unsettled", "--store", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, (out, err)
    assert err.startswith("agentgate: error: agentgate_once: the row of call '") and "allow_index 0" in err, (
        err
    )
