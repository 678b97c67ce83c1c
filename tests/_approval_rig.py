"""A Gate whose call waits for an approval, and ``agentgate approval sign --store`` run against
it: the set-up the approval tests that sign from the command line share
(test_cli_approval_r72_closed.py, test_approval_r73_quorum_tally.py and those that import them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _cli import cli

from agentgate.capabilities import Call
from agentgate.gate import Gate
from agentgate.keys import SigningKey, save_key
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore, Store
from agentgate.store._postgres import PostgresStore


class ApprovalRig:
    """A Gate on the policy ``text`` (a template naming the dids of root, agent, lead and lead2),
    stored in the PostgreSQL database at ``url`` or else the SQLite file ``path/s.db``; the agent's
    refund of 800 asked once (``call-1``), waiting for approval. lead's and lead2's keys are saved
    under ``path/k``, for ``sign``."""

    def __init__(self, path: Path, text: str, url: str | None = None) -> None:
        self.keys = {n: SigningKey.generate() for n in ("root", "agent", "lead", "lead2")}
        for name in ("lead", "lead2"):
            save_key(self.keys[name], path / "k", name)
        self.path = path
        self.url = url or str(path / "s.db")
        store: Store = PostgresStore(url) if url else SQLiteStore(path / "s.db")
        self.gate = Gate(parse_policy(text.format(**{n: k.did for n, k in self.keys.items()})), store)
        self.agent = self.gate.issue(self.keys["root"], name="agent", key=self.keys["agent"], role="worker")
        self.call = Call.tool("refund", {"amount": 800})
        self.asked = self.gate.authorize(self.agent, self.call, call_id="call-1")
        assert self.asked.needs_approval

    def sign(
        self, capsys: pytest.CaptureFixture[str], payload: dict[str, Any], who: str
    ) -> tuple[int, str, str]:
        """``agentgate approval sign`` of ``payload`` as ``who``, checked against the rig's store."""
        (self.path / "p.json").write_text(json.dumps(payload), encoding="utf-8")
        return cli(
            capsys, "approval", "sign", str(self.path / "p.json"), "--as", str(self.path / "k" / f"{who}.key"),
            "--store", self.url,
        )  # fmt: skip
