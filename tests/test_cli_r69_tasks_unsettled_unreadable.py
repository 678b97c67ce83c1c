"""``agentgate tasks unsettled`` with one malformed call row among good ones (review R69).

As ``budget held`` did (fixed in the same round), one ``agentgate_once`` row edited outside
agentgate (its reservations no JSON, its ``allow_index`` past the log's end) stopped ``tasks
unsettled`` from listing any call: the operator saw one error line and none of the calls left
to settle. Every readable call is listed now, and each unreadable row is named on standard
error, exit 2. Real components: a Gate over a SQLite file, the row edited through a second
connection, the CLI's ``main``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_gate_once import PAY, RUN, _gate, _new

from agentgate.cli.main import main


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


def _edit(path: Path, sql: str, *args: object) -> None:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute(sql, args)
        conn.commit()


@pytest.mark.parametrize(
    ("column", "value", "said"),
    [
        ("reservations", "not json", "not a JSON list of reservation ids"),
        ("allow_index", 10_000, "past the end of the audit log"),
    ],
)
def test_tasks_unsettled_lists_every_readable_call_and_names_each_unreadable_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], column: str, value: object, said: str
) -> None:
    """Review R69: one malformed row among three unsettled calls: ``tasks unsettled`` listed
    none (exit 2, one line). The two readable calls are listed (``--json`` and the table), the
    malformed row named on standard error with what is wrong, exit 2."""
    keys, path, agent = _new(tmp_path)
    with _gate(path, keys) as gate:
        auths = [gate.authorize(agent, PAY, call_id=f"c{n}", run_id=RUN) for n in range(3)]
        gate.flush()
    good1, bad, good2 = (a.once_key for a in auths)
    _edit(path, f"UPDATE agentgate_once SET {column} = ? WHERE key = ?", value, bad)
    code = main(["tasks", "unsettled", "--json", "--store", str(path)])
    out, err = capsys.readouterr()
    assert code == 2, err
    assert sorted(row["key"] for row in json.loads(out)) == sorted([good1, good2])
    (line,) = err.strip().splitlines()
    assert line.startswith("agentgate: error: ") and f"'{bad}'" in line and said in line, line
    code = main(["tasks", "unsettled", "--store", str(path)])
    out, err = capsys.readouterr()
    assert code == 2 and f"{good1}" in out and f"{good2}" in out and f"{bad}" not in out, out
