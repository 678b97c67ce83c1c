"""Review R83: a dead letter row whose authority chain or errors hold JSON nested past the parser's
depth (a row edited by hand or by another program) is a store error naming the letter and the
field, exit 2, as docs/tasks.md (Dead letters) says of a chain or errors that are not their JSON:
until R83 ``agentgate tasks dead-letters`` ended in a ``RecursionError`` traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_store_dead_letters import letter

from agentgate.cli.main import main
from agentgate.store import SQLiteStore
from agentgate.store.dead_letters import DeadLetterStore

DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("column", ["authority_chain", "errors"])
def test_a_dead_letter_nested_past_the_parsers_depth_is_a_store_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], column: str
) -> None:
    path = tmp_path / "ag.db"
    with SQLiteStore(path) as store:
        DeadLetterStore(store).record(letter(1))
        with store.transaction() as tx:
            tx.execute(f"UPDATE agentgate_dead_letters SET {column} = ?", (DEEP,))
    for json_flag in ([], ["--json"]):
        assert main(["tasks", "dead-letters", *json_flag, "--store", str(path)]) == 2
        out, err = capsys.readouterr()
        assert out == "" and f"dead letter 'id-1': the stored {column} '[[[" in err, err
        assert "corrupt row" in err and "Traceback" not in err
