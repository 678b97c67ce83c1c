"""``agentgate broker inventory`` names the journal's rows set aside at restart (review R69), as
``broker leases`` and ``broker queue`` do: until then it printed the GPUs of a lease set aside (one
written before review R68, tests/test_broker_r69_old_rows.py) as free without a word, although the
lease's holder may still run on them until its next renewal ends it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _cli import cli
from test_broker_r69_old_rows import KELVIN_80, _old_rows

from agentgate.store import SQLiteStore

INVENTORY = (
    "nodes:\n"
    + "".join(f"  - {{name: n00{n}}}\n" for n in range(2))
    + "gpus:\n"
    + "".join(
        f"  - {{id: n00{n}/g{g}, type: H100, memory_gb: 80, node: n00{n}}}\n"
        for n in range(2)
        for g in range(8)
    )
)


def _store_with_a_lease_set_aside(tmp_path: Path) -> tuple[Path, Path]:
    """A busy broker's journal whose lease ``keep`` was written before review R68, and an
    inventory of its 16 GPUs."""
    db = tmp_path / "old.db"
    _old_rows(db, lease={"gpu_type": KELVIN_80})
    inventory = tmp_path / "cluster.yaml"
    inventory.write_text(INVENTORY, encoding="utf-8")
    return db, inventory


SET_ASIDE_WARNING = "agentgate: warning: broker 'default': lease 'keep' set aside, not restored"
"""The warning the broker's log gives of that lease, said once by the CLI (review R72: agentgate's
log warnings are said as the command's warnings; before, a bare line on a terminal, and nothing
under pytest, whose log capture took the record)."""


def _warned_once(err: str) -> bool:
    return len(err.splitlines()) == 1 and err.startswith(SET_ASIDE_WARNING)


def test_the_table_names_the_lease_set_aside(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review R69: the table showed the set-aside lease's GPUs free and never named it; the line
    ``broker leases`` prints for it comes right after the header."""
    db, inventory = _store_with_a_lease_set_aside(tmp_path)
    code, out, err = cli(capsys, "broker", "leases", "--store", str(db))
    assert code == 0 and _warned_once(err), err
    (aside_line,) = [line for line in out.splitlines() if "set aside" in line]
    code, out, err = cli(capsys, "broker", "inventory", "--inventory", str(inventory), "--store", str(db))
    assert code == 0 and _warned_once(err), err
    lines = out.splitlines()
    assert lines[0].startswith("broker 'default': state as of ")
    assert lines[1] == aside_line
    assert "'keep'" in aside_line and "\\u212a80" in aside_line


def test_json_lists_the_rows_set_aside(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review R69: ``--json`` had no ``set_aside``, which ``leases --json`` and ``queue --json``
    have; it lists the same rows."""
    db, inventory = _store_with_a_lease_set_aside(tmp_path)
    code, out, _ = cli(capsys, "broker", "leases", "--store", str(db), "--json")
    assert code == 0
    expected = json.loads(out)["set_aside"]
    assert [row["id"] for row in expected] == ["keep"]
    command = ("broker", "inventory", "--inventory", str(inventory), "--store", str(db), "--json")
    code, out, err = cli(capsys, *command)
    assert code == 0 and _warned_once(err), err
    assert json.loads(out)["set_aside"] == expected


def test_a_journal_with_nothing_set_aside_adds_no_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing set aside: no line, and ``set_aside`` is ``[]`` in ``--json``."""
    SQLiteStore(tmp_path / "new.db").close()  # a store the broker has not written to yet
    inventory = tmp_path / "cluster.yaml"
    inventory.write_text(INVENTORY, encoding="utf-8")
    command = ["broker", "inventory", "--inventory", str(inventory), "--store", str(tmp_path / "new.db")]
    code, out, err = cli(capsys, *command)
    assert (code, err) == (0, ""), err
    assert "set aside" not in out
    code, out, _ = cli(capsys, *command, "--json")
    assert code == 0 and json.loads(out)["set_aside"] == []
