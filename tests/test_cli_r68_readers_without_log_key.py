"""`budget held` and `tasks unsettled` only read: they list rows and the `allow` entries that made
them, and check no signature. Until review R68 both refused to run without the log's private key
(exit 2, `no log key there`), and, unlike the `audit` readers, take no `--key log.pub` to read
without it: an operator on a fresh store (`store init`, which creates no key), on a copy of the
store, or on a host that does not hold the secret could not list what waits to be settled."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from _cli import cli
from test_gate_once import PAY, RUN, _policy_text

from agentgate.gate import Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore


@pytest.fixture(autouse=True)
def _no_log_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTGATE_LOG_KEY", raising=False)
    monkeypatch.delenv("AGENTGATE_LOG_PREVIOUS_KEYS", raising=False)


def test_a_store_just_set_up_lists_nothing_held_or_unsettled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R68: after `agentgate store init` (a log, no log key) `budget held` and `tasks
    unsettled` said `no log key there ...`, exit 2, where there is simply nothing to list; they
    create no key either."""
    path = str(tmp_path / "new.db")
    assert cli(capsys, "store", "init", "--store", path)[0] == 0
    assert cli(capsys, "budget", "held", "--store", path) == (0, "no held reservations\n", "")
    assert cli(capsys, "tasks", "unsettled", "--store", path) == (0, "no unsettled calls\n", "")
    assert cli(capsys, "budget", "held", "--json", "--store", path) == (0, "[]\n", "")
    assert not (tmp_path / "log.key").exists() and not (tmp_path / "log.pub").exists()


def test_held_and_unsettled_are_listed_where_the_log_key_is_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R68: a once-only call allowed and never finished (its worker died) is listed, with
    its `allow` entry and its held reservation, by an operator whose host lacks the log key (it
    was moved away here), as it is where the key is."""
    path = tmp_path / "st.db"
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    with Gate(parse_policy(_policy_text(keys), source="once.yaml"), SQLiteStore(path)) as gate:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
        assert gate.authorize(agent, PAY, call_id="c1", run_id=RUN).allowed
        gate.flush()
    with contextlib.closing(SQLiteStore(path)) as store:
        ((key, index),) = store.query("SELECT key, allow_index FROM agentgate_once")
    with_key = {
        verb: cli(capsys, *verb, "--json", "--store", str(path))
        for verb in (("budget", "held", "--older-than", "0"), ("tasks", "unsettled"))
    }
    (tmp_path / "log.key").rename(tmp_path / "elsewhere.key")
    for verb, (code, out, err) in with_key.items():
        assert code == 0, err
        assert cli(capsys, *verb, "--json", "--store", str(path)) == (0, out, ""), verb
    (held,) = json.loads(with_key["budget", "held", "--older-than", "0"][1])
    assert held["once_key"] == key and held["allow_index"] == index
    (unsettled,) = json.loads(with_key["tasks", "unsettled"][1])
    assert unsettled["key"] == key and unsettled["resource"] == "tool:pay"
    assert not (tmp_path / "log.key").exists()
