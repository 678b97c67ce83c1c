"""Review R69 of ``agentgate broker leases --json`` and ``broker queue --json``.

Neither said which GPU type a lease or a waiting request was for (``gpu_type``), although a lease
is decided and priced by it (``gpu:<type>``), and docs/broker.md named none of either output's
keys. Both carry ``gpu_type`` (the request's, ``null`` for any type) and the docs list each
output's keys, which this test holds to the code.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_broker_store import FakeClock, empty_broker, run_cli

from agentgate.dispatch.broker import GangRequest
from agentgate.store import SQLiteStore
from agentgate.store.broker_leases import BrokerLeaseStore

DOCS = Path(__file__).resolve().parent.parent / "docs" / "broker.md"


@pytest.fixture
def typed_store(tmp_path: Path) -> str:
    """A lease for type ``GPU`` (``synthetic_topology``'s) and a waiting request for any type."""
    path = tmp_path / "agentgate.db"
    with SQLiteStore(path) as store:
        broker = empty_broker(BrokerLeaseStore(store), FakeClock())
        broker.submit(GangRequest("typed", "a", 16, gpu_type="h100"))
        broker.submit(GangRequest("any", "b", 4))
    return str(path)


def _documented(verb: str) -> list[str]:
    """The keys docs/broker.md lists for ``agentgate broker VERB --json``, in order."""
    match = re.search(rf"`{verb} --json` keys: ([^.]*)\.", DOCS.read_text())
    assert match, f"docs/broker.md lists no keys of {verb} --json"
    return re.findall(r"`(\w+)`", match.group(1))


def test_leases_and_queue_json_name_the_gpu_type(
    typed_store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R69: neither JSON output said the GPU type asked for; both carry ``gpu_type``."""
    assert run_cli(["broker", "leases", "--store", typed_store, "--json"]) == 0
    (lease,) = json.loads(capsys.readouterr().out)["leases"]
    assert lease["id"] == "typed" and lease["gpu_type"] == "h100"
    assert run_cli(["broker", "queue", "--store", typed_store, "--json"]) == 0
    (waiting,) = json.loads(capsys.readouterr().out)["queue"]
    assert waiting["id"] == "any" and waiting["gpu_type"] is None


def test_the_docs_list_the_keys_of_leases_and_queue_json(
    typed_store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R69: docs/broker.md named no key of ``leases --json`` or ``queue --json``; it lists
    them, as the code writes them."""
    assert run_cli(["broker", "leases", "--store", typed_store, "--json"]) == 0
    leases = json.loads(capsys.readouterr().out)
    assert _documented("leases") == list(leases) + list(leases["leases"][0])
    assert run_cli(["broker", "queue", "--store", typed_store, "--json"]) == 0
    queue = json.loads(capsys.readouterr().out)
    assert _documented("queue") == list(queue) + list(queue["queue"][0])
