"""`agentgate budget held` and `agentgate budget settle` (agentgate/cli/budget.py) print a held
reservation's grant as its row stores it: a row written outside agentgate whose grant holds a
terminal escape or a line break is printed escaped, one line per reservation, as every other
table prints text it did not make itself."""

from __future__ import annotations

import json
from pathlib import Path

from test_cli_r58_held import _cli, _killed_worker
from test_gate_once import _new as _once_new
from test_gate_once import _policy_text

from agentgate.gate import Gate
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore

HOSTILE = "\x1b[2J\x1b[31mgrant\nforged line"


def test_a_held_reservations_grant_written_outside_agentgate_is_printed_escaped(tmp_path: Path) -> None:
    """Review R60: budget held/settle printed a stored grant id raw: a \\x1b[2J cleared the terminal."""
    keys, path, agent = _once_new(tmp_path)
    with Gate(parse_policy(_policy_text(keys), source="once.yaml"), SQLiteStore(path)) as gate:
        _killed_worker(gate, agent)
    with SQLiteStore(path) as store, store.transaction() as tx:
        tx.execute("UPDATE budget_reservations SET chain = ?", (json.dumps([HOSTILE]),))
        # Its budget too (review R67: a chain naming a grant without one is refused to settle).
        tx.execute("INSERT INTO budget_ledger (grant_id, cap, remaining) VALUES (?, 100, 99)", (HOSTILE,))
        ((reservation,),) = tx.execute("SELECT id FROM budget_reservations")
    code, table = _cli("budget", "held", "--older-than", "0", "--store", str(path))
    assert code == 0 and "\x1b" not in table and "\\x1b[2J" in table
    assert len(table.splitlines()) == 2  # the header and the one reservation
    code, out = _cli("budget", "settle", reservation, "--ran", "--older-than", "0", "--store", str(path))
    assert code == 0 and "\x1b" not in out and "\\nforged line" in out and len(out.splitlines()) == 1
