"""Review R82: benchmark options a run cannot use end it with argparse's one line and status 2
(``benchmarks/_args.py``), before anything starts: ``dispatch_http.py --rounds -1`` ran 22 s then
failed with a traceback and no goals line (``--rounds 0`` silently ran 2,000 rounds, ``--warmup
-10`` measured 10 rounds reported as 20); ``broker.py --max-draining -1`` or ``--locality-wait nan``
ended in the broker's traceback. ``dispatch.py`` on a slice whose arrivals all fall at one time
replayed the same arrivals under every ``--load`` label: it is refused, naming the trace."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MOONCAKE = ROOT.parent / "shared" / "data" / "traces" / "mooncake_conversation_trace.jsonl"


@pytest.mark.parametrize(
    ("script", "args", "says"),
    [
        ("dispatch_http.py", ["--rounds", "-1"], "argument --rounds: must be 1 or more"),
        ("dispatch_http.py", ["--rounds", "0"], "argument --rounds: must be 1 or more"),
        ("dispatch_http.py", ["--warmup", "-10"], "argument --warmup: must be 0 or more"),
        ("broker.py", ["--quick", "--max-draining", "-1"], "argument --max-draining: must be 0 or more"),
        ("broker.py", ["--quick", "--locality-wait", "nan"], "argument --locality-wait: must be 0 or more"),
        ("broker.py", ["--quick", "--drain-after", "-5"], "argument --drain-after: must be 0 or more"),
        (
            "dispatch.py",
            ["--limit", "10", "--load", "0.1,5", "--trace", str(MOONCAKE), "--json"],
            "its first 10 requests arrive at one time, so no --load can set their rate",
        ),
    ],
)
def test_an_option_no_run_can_use_ends_with_one_line_and_status_2(
    script: str, args: list[str], says: str
) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, (done.stdout[-2000:], done.stderr[-2000:])
    assert says in done.stderr.splitlines()[-1] and "Traceback" not in done.stderr, done.stderr[-2000:]
