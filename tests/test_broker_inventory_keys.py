"""``agentgate broker inventory`` shows GPUs and leases and never calls a backend: it runs without
the backends' API keys (it refused unless every ``api_key_env`` / ``api_key_file`` was readable,
so the topology could not be checked on a machine without the production secrets, and a key was
read into a process that needs none). Found by review r10."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

INVENTORY = """\
interconnect:
  hierarchy: [nvlink_domain, node, rack]
racks: [{name: rack-1}]
nodes:
  - {name: node-a, rack: rack-1}
gpus:
  - {id: a0, type: H100, memory_gb: 80, node: node-a, nvlink_domain: nvl-a}
backends:
  - name: b0
    url: http://127.0.0.1:9
    engine: vllm
    models: [m]
    gpus: [a0]
    api_key_env: AGENTGATE_OPEN_R10_UNSET_KEY
"""


def test_broker_inventory_runs_without_the_backend_keys(tmp_path: Path) -> None:
    from agentgate.store import SQLiteStore

    path = tmp_path / "inv.yaml"
    path.write_text(INVENTORY)
    SQLiteStore(tmp_path / "store.db").close()
    command = ["broker", "inventory", "--inventory", str(path), "--store", str(tmp_path / "store.db")]
    done = subprocess.run(
        [sys.executable, "-m", "agentgate.cli.main", *command],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "a0" in done.stdout


def test_read_keys_false_reads_no_key_but_still_refuses_both_sources(tmp_path: Path, monkeypatch) -> None:
    import pytest

    from agentgate.dispatch.inventory import parse_inventory
    from agentgate.errors import BackendCredentialError

    monkeypatch.setenv("AGENTGATE_OPEN_R10_UNSET_KEY", "sk-test-not-read-1234")
    inventory = parse_inventory(INVENTORY, read_keys=False)
    assert inventory.backends[0].api_key is None
    assert parse_inventory(INVENTORY).backends[0].api_key is not None  # the default reads it
    both = INVENTORY + "    api_key_file: /run/secrets/x\n"
    with pytest.raises(BackendCredentialError, match="not both"):
        parse_inventory(both, read_keys=False)
