"""Hash seeds for the tests that run one script in processes of different ``PYTHONHASHSEED``
(review R91, third reading).

A name has two readings (``_confusables.readings``, a frozenset), and ``bobI`` reads as ``bobi``
and as ``bobl``: code that took the first reading a set gives named either, by the process's hash
seed. A test that such code now answers alike in every process must run it under two seeds that
order the readings apart, or it passes against the old code too. Which seeds do depends on
CPython's hashing (the readings' order under seeds 1 and 3 differed on 3.11; nothing promised it
on 3.12 or 3.13), so they are found at run time: ``seeds_ordering_apart`` asks short processes of
seeds 0, 1, 2 ... in turn how they order the readings, and skips the test, saying so, where none
of ``SEEDS_PROBED`` order them apart. The children are killed where they outlive their time
(``finished``), never left running after a hung test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

import agentgate

SEEDS_PROBED = 16
"""The seeds tried (0 to 15): two seeds order two strings apart about one time in two."""

PROBE_TIMEOUT_S = 30.0
"""How long one probe may run (it imports ``agentgate._confusables`` and prints a list)."""

_PROBE = """
import json, sys
from agentgate._confusables import readings
print(json.dumps(list(readings(sys.argv[1]))))
"""


def child_env(seed: str) -> dict[str, str]:
    """This process's environment for a child of hash seed ``seed`` that imports what this
    process imports: the checkout ``agentgate`` was imported from, then this ``sys.path`` (an
    editable install's finder is not on it, and a probe runs without ``site``)."""
    checkout = str(Path(agentgate.__file__).resolve().parents[1])
    return {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": os.pathsep.join([checkout, *sys.path])}


def finished(running: Sequence[subprocess.Popen[str]], timeout: float) -> list[tuple[int, str, str]]:
    """Each child's ``(returncode, stdout, stderr)``, waited for in turn, each within
    ``timeout`` seconds; where one outlives it, every child not yet done is killed and reaped
    and the test fails, naming the one that hung."""
    answers = []
    try:
        for process in running:
            try:
                out, err = process.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                pytest.fail(
                    f"a child process ({process.args!r:.200}) ran past {timeout} s; every child was killed"
                )
            answers.append((process.returncode, out, err))
    finally:
        for process in running:
            if process.poll() is None:
                process.kill()
                process.communicate()
    return answers


def readings_order(name: str, seed: str) -> list[str]:
    """The order a process of hash seed ``seed`` takes ``_confusables.readings(name)`` in."""
    probe = subprocess.Popen(
        [sys.executable, "-S", "-c", _PROBE, name],
        env=child_env(seed),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    ((code, out, err),) = finished([probe], PROBE_TIMEOUT_S)
    assert code == 0, err[-2000:]
    order: list[str] = json.loads(out)
    return order


def seeds_ordering_apart(name: str) -> tuple[str, str]:
    """Two values of ``PYTHONHASHSEED`` under which processes take ``_confusables.readings(name)``
    in different orders: seed 0 and the first of 1 to ``SEEDS_PROBED - 1`` that orders them
    otherwise. Skips the test where none does (or ``name`` has one reading), naming the order."""
    first = readings_order(name, "0")
    for seed in range(1, SEEDS_PROBED):
        if readings_order(name, str(seed)) != first:
            return "0", str(seed)
    pytest.skip(
        f"no hash seed of 0 to {SEEDS_PROBED - 1} orders the readings of {name!r} otherwise than "
        f"{first} on this Python: the processes could not tell the old order-dependent code apart"
    )


def printed_under_seeds_ordering_apart(name: str, script: str, policy: str, tmp_path: Path) -> list[str]:
    """What ``script`` printed in each of two processes whose hash seeds order the readings of
    ``name`` apart (``seeds_ordering_apart``). Each runs in a folder of its own under ``tmp_path``
    (its store apart), which holds ``policy`` as ``p.yaml`` and is given as ``sys.argv[1]``; the
    test fails where either does not exit 0 within 60 s."""
    running = []
    for seed in seeds_ordering_apart(name):
        folder = tmp_path / seed
        folder.mkdir()
        (folder / "p.yaml").write_text(policy)
        running.append(
            subprocess.Popen(
                [sys.executable, "-c", script, str(folder)],
                env=child_env(seed),
                cwd=folder,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    printed = []
    for code, out, err in finished(running, 60):
        assert code == 0, err[-2000:]
        printed.append(out)
    return printed
