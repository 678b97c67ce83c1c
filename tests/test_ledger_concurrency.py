"""Two processes x 16 threads spend one budget at once, on both stores: nobody overspends."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentgate.store import Store
from agentgate.store.ledger import BudgetLedger

CAP = 600
PROCESSES, THREADS, ATTEMPTS = 2, 16, 12

SPENDER = """
import json, random, sys, threading
from agentgate.errors import BudgetExceeded
from agentgate.store import open_store
from agentgate.store.ledger import BudgetLedger

url, cap, threads, attempts, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
store = open_store(url)
ledger = BudgetLedger(store)
totals = {"committed": 0, "spent": 0, "refused": 0}
lock = threading.Lock()
start = threading.Barrier(threads)

def spend(n):
    rng = random.Random(seed * 1000 + n)
    start.wait()
    for _ in range(attempts):
        amount = rng.randint(1, 9)
        try:
            reservation = ledger.reserve(None, ["org", "team", "agent"], {"org": cap, "agent": cap}, amount)
        except BudgetExceeded:
            with lock:
                totals["refused"] += 1
            continue
        ledger.commit(reservation, amount)
        with lock:
            totals["committed"] += 1
            totals["spent"] += amount

workers = [threading.Thread(target=spend, args=(n,)) for n in range(threads)]
for w in workers:
    w.start()
for w in workers:
    w.join()
store.close()
print(json.dumps(totals))
"""


def test_concurrent_spenders_never_overspend(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    url = store.url
    BudgetLedger(store)  # create the tables before the race
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SPENDER, url, str(CAP), str(THREADS), str(ATTEMPTS), str(seed)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for seed in range(PROCESSES)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-2000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    spent = sum(r["spent"] for r in results)
    attempts = PROCESSES * THREADS * ATTEMPTS
    assert sum(r["committed"] + r["refused"] for r in results) == attempts
    overspend = max(0, spent - CAP)
    with capsys.disabled():
        print(f"\n[{store.dialect}] {attempts} attempts, spent {spent} of {CAP}: overspend = {overspend}")
    assert overspend == 0
    ledger = BudgetLedger(store)
    assert ledger.remaining("org") == ledger.remaining("agent") == CAP - spent
    assert ledger.spent("org") == spent
    assert CAP - spent < 9  # the race really happened at the edge of the budget
