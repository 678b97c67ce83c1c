"""``agentgate store`` on a SQLite store, and ``agentgate --help``, load no PostgreSQL driver
(review R64): ``agentgate.cli.store`` imported psycopg at module level to recognise PostgreSQL's
``permission denied``, which only a PostgreSQL store (that has loaded psycopg) can raise, and
help registers every group, so each paid for the driver (about 0.15 s here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_RUN = """
import json, sys
from agentgate.cli.main import main
try:
    code = main(sys.argv[1:])
except SystemExit as exit:
    code = exit.code
sys.stdout.flush()
print("\\n" + json.dumps({"code": code, "modules": sorted(sys.modules)}))
"""


def loaded(cwd: Path, *argv: str) -> tuple[int, set[str]]:
    """Run ``agentgate ARGV`` in a fresh interpreter; its exit code and every module it imported."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "AGENTGATE_STORE": str(cwd / "s.db")}
    done = subprocess.run(
        [sys.executable, "-c", _RUN, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip(), done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    return report["code"], set(report["modules"])


def test_store_init_on_sqlite_loads_no_postgresql_driver_nor_authority(tmp_path: Path) -> None:
    """Review R64: ``agentgate store init`` on a SQLite file creates its tables without loading
    psycopg, or the authority engine, which only ``store prune`` uses."""
    code, modules = loaded(tmp_path, "store", "init")
    assert code == 0 and (tmp_path / "s.db").exists()
    assert sorted(modules & {"psycopg", "agentgate.authority"}) == []


def test_store_prune_on_sqlite_loads_no_postgresql_driver(tmp_path: Path) -> None:
    """Review R64: ``agentgate store prune`` on a SQLite file prunes without loading psycopg."""
    assert loaded(tmp_path, "store", "init")[0] == 0
    code, modules = loaded(tmp_path, "store", "prune", "--older-than", "30d")
    assert code == 0
    assert "psycopg" not in modules


def test_help_loads_no_postgresql_driver(tmp_path: Path) -> None:
    """Review R64: ``agentgate --help`` lists every group without loading psycopg."""
    code, modules = loaded(tmp_path, "--help")
    assert code == 0
    assert "psycopg" not in modules


def test_help_loads_no_gpu_inventory(tmp_path: Path) -> None:
    """Review R64: ``agentgate --help`` registers the broker group without loading the GPU
    inventory, which only ``agentgate broker inventory`` reads."""
    code, modules = loaded(tmp_path, "--help")
    assert code == 0
    assert "agentgate.dispatch.inventory" not in modules
