"""Which agent granted before a running Gate names, for a free name that reads as two (review R91,
third reading).

``bobI`` reads as ``bobi`` (its ``I`` case folded) and as ``bobl`` (its ``I`` taken for ``l``).
After review R91's second reading a running Gate named the first of them in code point order,
``bobi``, whenever each was granted, while a restarted Gate, or another process on the store
(``AgentNames.claim``), names the first granted, the name breaking a tie within a second: with
``bobl`` granted before ``bobi``, the refusal, its audit reason and its hint ("issue under 'bobi'
itself") named ``bobi`` until the Gate restarted, then ``bobl``. The Gate now keeps when the
store says each name it holds was first granted, and names the one ``claim`` names."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from agentgate.errors import Denied
from agentgate.gate import Gate
from agentgate.keys import SigningKey

ROOT, WORKER = (SigningKey(bytes([i]) * 32) for i in (1, 2))
POLICY = f"""version: 1
trust_anchors:
  root: {{did: {ROOT.did}}}
principals:
  worker: {{kind: agent, did: {WORKER.did}, roles: [r]}}
tools:
  t.x: {{}}
roles:
  r:
    capabilities: [{{resource: tool:t.x}}]
    delegation: {{max_depth: 2, capabilities: [{{resource: tool:t.x}}]}}
"""


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Callable[[float], None]:
    """Set the wall clock ``seconds`` past the test's start: grants a second or more apart,
    without waiting for them."""
    start = time.time()
    now = [start]
    monkeypatch.setattr(time, "time", lambda: now[0])

    def at(seconds: float) -> None:
        now[0] = start + seconds

    return at


def _opened(folder: Path) -> Gate:
    (folder / "p.yaml").write_text(POLICY)
    return Gate.open(folder / "p.yaml", folder / "s.db")


def _read_as(gate: Gate) -> str:
    """The refusal of ``Gate.issue(name="bobI")``, checked as ``name_reads_alike``."""
    with pytest.raises(Denied) as refused:
        gate.issue(ROOT, name="bobI", key=WORKER, role="r")
    assert refused.value.finding is not None
    assert refused.value.finding.code == "name_reads_alike"
    return str(refused.value)


def _named(gate: Gate) -> str:
    """The agent granted before that the refusal of ``bobI`` names, and says to issue under."""
    message = _read_as(gate)
    named = message.partition("reads as ")[2].partition(",")[0].strip("'")
    assert f"issue under {named!r} itself" in message
    return named


def test_the_first_granted_is_named_before_and_after_a_restart(
    tmp_path: Path, clock: Callable[[float], None]
) -> None:
    """bobl, granted seconds before bobi, is named by the Gate that granted both, as by the
    Gate opened after it on the same store."""
    gate = _opened(tmp_path)
    clock(0)
    gate.issue(ROOT, name="bobl", key=WORKER, role="r")
    clock(5)
    gate.issue(ROOT, name="bobi", key=WORKER, role="r")
    assert _named(gate) == "bobl"
    gate.close()
    restarted = Gate.open(tmp_path / "p.yaml", tmp_path / "s.db")
    assert _named(restarted) == "bobl"
    restarted.close()


def test_a_name_granted_again_keeps_its_first_grant_time(
    tmp_path: Path, clock: Callable[[float], None]
) -> None:
    """After a restart, bobi then bobl granted again: the Gate orders them by their first grants
    on the store (bobl's), not by when it granted them again, as ``AgentNames.claim`` does."""
    gate = _opened(tmp_path)
    clock(0)
    gate.issue(ROOT, name="bobl", key=WORKER, role="r")
    clock(5)
    gate.issue(ROOT, name="bobi", key=WORKER, role="r")
    gate.close()
    restarted = Gate.open(tmp_path / "p.yaml", tmp_path / "s.db")
    clock(10)
    restarted.issue(ROOT, name="bobi", key=WORKER, role="r")
    clock(15)
    parent = restarted.issue(ROOT, name="bobl", key=WORKER, role="r")
    assert _named(restarted) == "bobl"
    with pytest.raises(Denied, match="a sub-agent named 'bobI' reads as 'bobl'"):
        restarted.delegate(
            parent, name="bobI", key=WORKER, capabilities=["tool:t.x"], ttl=timedelta(minutes=1)
        )
    restarted.close()


def test_a_tie_within_a_second_is_broken_by_name(tmp_path: Path, clock: Callable[[float], None]) -> None:
    """bobl and bobi granted in the same second: bobi, the first in code point order, is named
    by the Gate that granted both and after a restart."""
    gate = _opened(tmp_path)
    clock(0)
    gate.issue(ROOT, name="bobl", key=WORKER, role="r")
    gate.issue(ROOT, name="bobi", key=WORKER, role="r")
    assert _named(gate) == "bobi"
    gate.close()
    restarted = Gate.open(tmp_path / "p.yaml", tmp_path / "s.db")
    assert _named(restarted) == "bobi"
    restarted.close()
