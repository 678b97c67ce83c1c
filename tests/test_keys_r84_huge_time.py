"""Review R84: a time that is an integer past a float's range (a dead letter's attempt time of 401
digits, a row edited by hand) is no ``OverflowError`` traceback. ``agentgate tasks dead-letters``
reports such a row as a store error naming the letter and the field, exit 2, as every other
corrupt field of it (docs/tasks.md, Dead letters); ``unix`` writes such a time as ``null`` and
``utc`` as ``-``, as they do infinity."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_store_dead_letters import letter

from agentgate._time import unix
from agentgate.cli._common import utc
from agentgate.cli.main import main
from agentgate.store import SQLiteStore
from agentgate.store.dead_letters import DeadLetterStore

HUGE = 10**400


def test_a_dead_letter_attempt_time_past_a_floats_range_is_a_store_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ag.db"
    errors = [{"attempt": 1, "error_class": "transient", "error_type": "E", "message": "m", "at": HUGE}]
    with SQLiteStore(path) as store:
        DeadLetterStore(store).record(letter(1))
        with store.transaction() as tx:
            tx.execute("UPDATE agentgate_dead_letters SET errors = ?", (json.dumps(errors),))
    for json_flag in ([], ["--json"]):
        assert main(["tasks", "dead-letters", *json_flag, "--store", str(path)]) == 2
        out, err = capsys.readouterr()
        assert out == "" and "dead letter 'id-1': the stored errors '[{" in err, err
        assert "corrupt row" in err and "Traceback" not in err


def test_a_dead_letter_attempt_time_a_float_holds_is_still_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ag.db"
    errors = [{"attempt": 1, "error_class": "transient", "error_type": "E", "message": "m", "at": 10**300}]
    with SQLiteStore(path) as store:
        DeadLetterStore(store).record(letter(1))
        with store.transaction() as tx:
            tx.execute("UPDATE agentgate_dead_letters SET errors = ?", (json.dumps(errors),))
    assert main(["tasks", "dead-letters", "--json", "--store", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)[0]["errors"][0]["at"] == 10**300


@pytest.mark.parametrize("huge", [HUGE, -HUGE], ids=["10**400", "-10**400"])
def test_times_past_a_floats_range_are_written_as_infinity_is(huge: int) -> None:
    assert unix(huge) is None and unix(float("inf")) is None
    assert utc(huge) == "-" and utc(float("inf")) == "-"


def test_times_a_float_holds_are_written_as_before() -> None:
    assert unix(1_795_969_091) == 1_795_969_091 and unix(1_795_969_091.0) == 1_795_969_091
    assert unix(1.5) == 1.5 and unix(None) is None and unix(float("nan")) is None
    assert utc(1_795_969_091) == "2026-11-29T16:18:11Z" and utc(None) == "-" and utc(float("nan")) == "-"
