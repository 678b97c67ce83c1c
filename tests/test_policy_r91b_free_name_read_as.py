"""Which agent granted before ``Gate.issue`` names, for a free name that reads as two (review R91,
second and third readings).

``bobI`` reads as ``bobi`` (its ``I`` case folded) and as ``bobl`` (its ``I`` taken for ``l``).
With free agents bobi and bobl granted, ``Gate.issue(name="bobI")`` is refused as reading as one
of them, which was chosen by the order of a frozenset of readings, which each process's hash
seed sets: "reads as 'bobl'" in some processes, "'bobi'" in others, in the refusal, its audit
reason and its hint ("issue under 'bobl' itself"). The second reading named the first of them in
code point order, in every process; but ``AgentNames.claim``, which a restarted Gate or another
process on the store asks, names the first granted, the name breaking a tie within a second, and
this test, granting bobi first, could not tell the two apart. It now grants bobl first: the Gate
that granted both and the Gate opened after it name bobl, in processes of two hash seeds that
order the readings apart (tests/_hash_seeds.py; in one process,
tests/test_policy_r91c_first_granted_named.py)."""

from __future__ import annotations

from pathlib import Path

from _hash_seeds import printed_under_seeds_ordering_apart
from test_policy_r91c_first_granted_named import POLICY  # its root and worker hold _ISSUE's keys

_ISSUE = """
import sys, time
from agentgate.errors import Denied
from agentgate.gate import Gate
from agentgate.keys import SigningKey

root, worker = SigningKey(bytes([1]) * 32), SigningKey(bytes([2]) * 32)
folder = sys.argv[1]
start = time.time()
now = [start]
time.time = lambda: now[0]  # bobi granted 5 s after bobl, without waiting for it

def attempt(gate):
    try:
        gate.issue(root, name="bobI", key=worker, role="r")
        print("issued")
    except Denied as refused:
        print(refused.finding.code if refused.finding else None, str(refused))
    gate.close()

gate = Gate.open(folder + "/p.yaml", folder + "/s.db")
gate.issue(root, name="bobl", key=worker, role="r")
now[0] = start + 5
gate.issue(root, name="bobi", key=worker, role="r")
attempt(gate)
attempt(Gate.open(folder + "/p.yaml", folder + "/s.db"))
"""


def test_the_name_read_as_is_the_same_in_every_process(tmp_path: Path) -> None:
    """Two processes whose hash seeds order the readings apart, each on its own store, name the
    same agent, before and after a restart: bobl, the first granted."""
    printed = printed_under_seeds_ordering_apart("bobI", _ISSUE, POLICY, tmp_path)
    answers = [line for out in printed for line in out.strip().splitlines()]
    assert len(answers) == 4
    assert len(set(answers)) == 1, answers
    assert answers[0].startswith(
        "name_reads_alike an agent named 'bobI' reads as 'bobl', an agent granted before"
    )
    assert "issue under 'bobl' itself" in answers[0]
