"""`agentgate tasks` (agentgate/cli/tasks.py): listing dead letters (by tool name or resource) and
shared breaker states, and listing and settling once-only calls from the command line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_gate_once import PAY, RUN, _cli
from test_gate_once import _gate as _once_gate
from test_gate_once import _new as _once_new
from test_store_dead_letters import letter

from agentgate.cli.main import main
from agentgate.store import SQLiteStore
from agentgate.store.dead_letters import DeadLetterStore
from agentgate.store.leases import SharedBreakers


def test_the_command_refuses_to_settle_a_call_allowed_moments_ago(tmp_path: Path) -> None:
    # `agentgate tasks settle` without --older-than: a call allowed moments ago may still run.
    keys, path, agent = _once_new(tmp_path)
    with _once_gate(path, keys) as gate:
        assert gate.authorize(agent, PAY, call_id="c1", run_id=RUN).allowed
        gate.flush()
        ((key,),) = gate.store.query("SELECT key FROM agentgate_once")
    code, _ = _cli("tasks", "settle", key, "--not-run", "--store", str(path))
    assert code == 1  # refused (until review R59, exit 2)
    code, _ = _cli("tasks", "settle", key, "--not-run", "--older-than", "0", "--store", str(path))
    assert code == 0


def test_cli_lists_dead_letters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ag.db"
    with SQLiteStore(path) as store:
        DeadLetterStore(store).record(letter(1))
    assert main(["tasks", "dead-letters", "--store", str(path)]) == 0
    out = capsys.readouterr().out
    assert "payments.refund" in out and "attempts_exhausted" in out and "TimeoutError (timeout)" in out
    assert main(["tasks", "dead-letters", "--json", "--store", str(path)]) == 0
    [item] = json.loads(capsys.readouterr().out)
    assert item["authority_chain"] == ["grant-root", "grant-child"]
    assert [e["error_class"] for e in item["errors"]] == ["transient", "timeout"]
    empty = tmp_path / "empty.db"
    SQLiteStore(empty).close()
    assert main(["tasks", "dead-letters", "--store", str(empty)]) == 0
    assert capsys.readouterr().out == "no dead letters\n"
    # A mistyped path is an error, not an empty store created on the spot.
    assert main(["tasks", "dead-letters", "--store", str(tmp_path / "typo.db")]) == 2
    assert "no store at" in capsys.readouterr().err and not (tmp_path / "typo.db").exists()
    with pytest.raises(SystemExit) as exit_info:
        main(["tasks", "dead-letters", "--limit", "0", "--store", str(path)])
    assert exit_info.value.code == 2


@pytest.mark.parametrize("name", ["payments.refund", "tool:payments.refund"])
def test_cli_filters_dead_letters_by_tool_name_or_resource(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """``--tool`` takes the tool's name or its resource, as ``agentgate audit show --tool`` does
    (review r37: ``tool:payments.refund`` matched nothing)."""
    path = tmp_path / "ag.db"
    with SQLiteStore(path) as store:
        DeadLetterStore(store).record(letter(1))
        DeadLetterStore(store).record(letter(2, tool="search.web"))
    assert main(["tasks", "dead-letters", "--json", "--tool", name, "--store", str(path)]) == 0
    assert [item["id"] for item in json.loads(capsys.readouterr().out)] == ["id-1"]


def test_cli_lists_shared_breakers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ag.db"
    SQLiteStore(path).close()
    assert main(["tasks", "breakers", "--store", str(path)]) == 0
    assert capsys.readouterr().out == "no shared breaker states\n"
    with SQLiteStore(path) as store:
        SharedBreakers(store).publish("tool:search", "open", 1_800_000_000.0)
        SharedBreakers(store).publish("backend:gpu-1", "closed", 1_800_000_000.0)
    assert main(["tasks", "breakers", "--store", str(path)]) == 0
    out = capsys.readouterr().out
    assert "tool:search" in out and "open" in out and "2027-01-15" in out
    assert main(["tasks", "breakers", "--json", "--store", str(path)]) == 0
    states = {b["key"]: b["state"] for b in json.loads(capsys.readouterr().out)}
    assert states == {"tool:search": "open", "backend:gpu-1": "closed"}


def test_cli_says_which_shared_breaker_row_is_corrupt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R54: a breaker row whose opened_at is not a number ('abc', kept as text by SQLite)
    made ``agentgate tasks breakers`` end in a ValueError traceback; it is a store error naming
    the key and the field."""
    path = tmp_path / "ag.db"
    with SQLiteStore(path) as store:
        SharedBreakers(store).publish("tool:search", "open", 1_800_000_000.0)
        with store.transaction() as tx:
            tx.execute("UPDATE agentgate_breakers SET opened_at = 'abc'")
    assert main(["tasks", "breakers", "--store", str(path)]) == 2
    assert "shared breaker 'tool:search': opened_at: the stored value 'abc'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("column", "value", "said"),
    [
        ("recorded_at", "'abc'", "recorded_at 'abc'"),
        ("authority_chain", "'not json'", "authority_chain 'not json'"),
        ("authority_chain", "'{}'", "authority_chain '{}'"),
        ("errors", "'[{\"x\": 1}]'", "errors '[{\"x\": 1}]'"),
        ("errors", "'\"text\"'", "errors '\"text\"'"),
    ],
)
def test_cli_says_which_dead_letter_row_is_corrupt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], column: str, value: str, said: str
) -> None:
    """Review R54: a dead letter row holding what no scheduler writes (recorded_at 'abc', an
    authority chain or errors that are not their JSON) made ``agentgate tasks dead-letters`` end
    in a ValueError, JSONDecodeError or TypeError traceback (an object as the chain was listed as
    its keys); it is a store error naming the letter and the field."""
    path = tmp_path / "ag.db"
    with SQLiteStore(path) as store:
        DeadLetterStore(store).record(letter(1))
        with store.transaction() as tx:
            tx.execute(f"UPDATE agentgate_dead_letters SET {column} = {value}")
    for json_flag in ([], ["--json"]):
        assert main(["tasks", "dead-letters", *json_flag, "--store", str(path)]) == 2
        assert f"dead letter 'id-1': the stored {said} is not" in capsys.readouterr().err


def _argument_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The error line of an argument argparse refuses (exit 2, after the usage lines)."""
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    assert exited.value.code == 2
    return capsys.readouterr().err.splitlines()[-1]


@pytest.mark.parametrize(
    ("limit", "said"),
    [
        ("9" * 5000, "expected an integer from 1 to 1000000, got '" + "9" * 40 + "'..."),
        (" 5", "expected a positive integer, got ' 5'"),
        ("5_000", "expected a positive integer, got '5_000'"),
        ("\u0665", "expected a positive integer, got '\u0665'"),
    ],
)
def test_a_limit_is_ascii_digits_and_one_too_large_is_out_of_range(
    capsys: pytest.CaptureFixture[str], limit: str, said: str
) -> None:
    """Review R55: --limit of more than 4,300 digits was 'expected a positive integer' (int()
    refuses to convert it), which it is, and ' 5', '5_000' and Arabic-Indic digits were read as
    int() reads them. Rule: ASCII digits, 1 to 1,000,000, a larger one of any length said so."""
    assert _argument_error(capsys, "tasks", "dead-letters", "--limit", limit) == (
        f"agentgate: error: argument --limit: {said}"
    )


@pytest.mark.parametrize("age", ["99999999999999999999", "1.0000000001"])
def test_settle_older_than_in_too_many_digits_is_said_to_be_seconds_too_long(
    capsys: pytest.CaptureFixture[str], age: str
) -> None:
    """Review R55: settle --older-than of 13 digits or more (or 10 after the point) was refused
    with the duration's 'write a positive whole number with a unit', though it is seconds."""
    assert _argument_error(capsys, "tasks", "settle", "k", "--ran", "--older-than", age) == (
        f"agentgate: error: argument --older-than: {age!r}: seconds are written in at most 12 "
        "digits, and at most 9 after the point (or give a duration such as 15m)"
    )
