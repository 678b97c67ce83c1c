"""Review R83: ``agentgate tasks dead-letters --tool tool:`` (``--tool "tool:$NAME"`` with ``NAME``
unset) names no tool and is refused, exit 2, as ``--tool ""`` is: until R83 the prefix was
removed, the empty name left read as no filter, and every tool's letters were listed."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_store_dead_letters import letter

from agentgate.cli.main import main
from agentgate.store import SQLiteStore
from agentgate.store.dead_letters import DeadLetterStore


@pytest.mark.parametrize("value", ["", "tool:"])
def test_a_tool_prefix_naming_no_tool_is_refused_as_an_empty_value(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    path = tmp_path / "ag.db"
    with SQLiteStore(path) as store:
        DeadLetterStore(store).record(letter(1))
        DeadLetterStore(store).record(letter(2, tool="search.web"))
    with pytest.raises(SystemExit) as exited:
        main(["tasks", "dead-letters", "--json", "--tool", value, "--store", str(path)])
    out, err = capsys.readouterr()
    assert exited.value.code == 2 and out == "", out
    assert "argument --tool:" in err and "names no" in err and "leave the flag out" in err, err
