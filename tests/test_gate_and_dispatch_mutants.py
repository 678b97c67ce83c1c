"""Review R46 (mutation testing of R44-R45's product changes): each test here kills a mutant of
those changes that no other test killed (a behaviour nobody checked). The mutant is named in each
test's comment."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from test_gate_delegation_parse_once import POLICY as PERF_POLICY

from agentgate.audit.merkle import leaf_hash
from agentgate.authority import GrantRepository, issue, record, revoke
from agentgate.authority._decision import revoke_holder
from agentgate.dispatch import Dispatcher, inventory_from_mapping
from agentgate.dispatch.router import Router, RouteRequest
from agentgate.gate import AgentIdentity, Gate
from agentgate.gate import _gate as gate_module
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.sim import chain_hashes
from agentgate.store import SQLiteStore, _sqlite
from agentgate.store.audit import AuditLog

_PROBE = r"""
import fcntl, os, struct, sys
fd = os.open(sys.argv[1], os.O_RDWR)
# F_GETLK: would a write lock on the whole file conflict with a lock another process holds?
found = fcntl.fcntl(fd, fcntl.F_GETLK, struct.pack("hhqqi", fcntl.F_WRLCK, 0, 0, 0, 0))
print("locked" if struct.unpack("hhqqi", found)[0] != fcntl.F_UNLCK else "free")
"""


def _locked_by_another_process(path: Path) -> bool:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, str(path)], capture_output=True, text=True, check=True
    )
    return out.stdout.strip() == "locked"


def test_creating_a_store_file_another_thread_made_keeps_this_processs_sqlite_locks(tmp_path: Path) -> None:
    # Kills: _create without O_EXCL (it opens and closes the file another thread just made, and
    # closing any descriptor of a file drops every POSIX lock the process holds on it: here the
    # shared lock of a live WAL connection, which tells another process's last connection that
    # the file is still in use).
    path = tmp_path / "agentgate.db"
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE t (x)")
        conn.commit()
        conn.execute("SELECT * FROM t").fetchall()
        assert _locked_by_another_process(path)  # the precondition: the connection holds its lock
        status = _sqlite._create(path)  # the file exists: made "meanwhile" by another thread
        assert status.st_ino == os.stat(path).st_ino
        assert _locked_by_another_process(path), "creating the store dropped this process's SQLite lock"
    finally:
        conn.close()


def test_the_cost_tie_break_prices_the_prompt_and_the_output_limit_each_at_its_own_rate() -> None:
    # Kills: _price counting only the prompt (input_per_mtok) or only the output limit
    # (output_per_mtok), keeping the dearest near-ties, or no cost tie-break at all. Two idle,
    # equally fast backends, one cheap on input and one cheap on output: a long prompt with a
    # short answer belongs on the first, a short prompt with a long output limit on the second.
    inventory = inventory_from_mapping(
        {
            "backends": [
                {
                    "name": "cheap-out",
                    "url": "http://127.0.0.1:9001",
                    "models": ["m"],
                    "cost": {"input_per_mtok": 1_000_000, "output_per_mtok": 100_000},
                },
                {
                    "name": "cheap-in",
                    "url": "http://127.0.0.1:9002",
                    "models": ["m"],
                    "cost": {"input_per_mtok": 100_000, "output_per_mtok": 1_000_000},
                },
            ]
        }
    )
    router = Router(inventory, seed=3)
    chosen: list[tuple[str, str]] = []
    for i in range(8):
        for kind, prompt, output in (("long prompt", 4000, 10), ("long output", 16, 4000)):
            request = RouteRequest(
                id=f"{kind}-{i}",
                model="m",
                prompt_tokens=prompt,
                max_output_tokens=output,
                prefix_hashes=chain_hashes((kind, i, b) for b in range(prompt // 16)),
                slo_ttft_s=30.0,
            )
            plan = router.route(request, float(i))
            chosen.append((kind, plan.backend))
            router.first_token(request.id, i + 0.1)
            router.finished(request.id, i + 0.2)
    assert set(chosen) == {("long prompt", "cheap-in"), ("long output", "cheap-out")}, chosen


def test_a_dispatchers_own_model_slo_outranks_the_policys_when_attached(tmp_path: Path) -> None:
    # Kills: attach_dispatcher letting the policy's slo.ttft_ms override the SLO the dispatcher
    # was given for that model (documented: "unless the dispatcher was given its own for it").
    policy = parse_policy(
        """
version: 1
models:
  fast: {cost_per_mtok: {input: 1, output: 1}, slo: {ttft_ms: 50}}
  slow: {cost_per_mtok: {input: 1, output: 1}, slo: {ttft_ms: 8000}}
  plain: {cost_per_mtok: {input: 1, output: 1}}
tools:
  search.web: {}
""",
        source="p.yaml",
    )
    inventory = inventory_from_mapping(
        {"backends": [{"name": "b", "url": "http://127.0.0.1:9", "models": ["fast", "slow", "plain"]}]}
    )
    dispatcher = Dispatcher(inventory, Router(inventory), slo_ttft_s=1.5, model_slo_ttft_s={"fast": 0.7})
    gate = Gate(policy, SQLiteStore(tmp_path / "agentgate.db"))
    try:
        gate.attach_dispatcher(dispatcher)
        assert dispatcher.slo_ttft("fast") == 0.7  # its own, given for that model
        assert dispatcher.slo_ttft("slow") == 8.0  # the policy's, which the dispatcher lacked
        assert dispatcher.slo_ttft("plain") == 1.5  # neither: the dispatcher's default
        request = dispatcher.route_request(_chat("fast"), slo_ttft_s=0.2)
        assert request.slo_ttft_s == 0.2  # the caller's own outranks both
        assert dispatcher.route_request(_chat("slow")).slo_ttft_s == 8.0
    finally:
        gate.close()


def _chat(model: str) -> dict[str, object]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def test_the_gates_parsed_delegations_stay_within_their_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Kills: the parsed-chain cache of delegate(call=...) never cleared (a long-lived supervisor
    # delegating per run would keep every token it ever read). The bound is lowered to 3 here.
    monkeypatch.setattr(gate_module, "DELEGATED_PARSED_MAX", 3)
    keys = {n: SigningKey.generate() for n in ("root", "boss", "alpha")}
    text = PERF_POLICY.format(root=keys["root"].did, boss=keys["boss"].did, alpha=keys["alpha"].did)
    gate = Gate(parse_policy(text, source="t.yaml"), SQLiteStore(tmp_path / "g.db"))
    try:
        boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")

        def delegate(call: str) -> AgentIdentity:
            return gate.delegate(
                boss,
                name="alpha",
                key=keys["alpha"],
                capabilities=["tool:lookup"],
                ttl=timedelta(minutes=5),
                call=call,
            )

        first = [delegate(f"call-{i}") for i in range(8)]
        assert 0 < len(gate._parsed_delegated) <= 3
        assert delegate("call-1").chain == first[1].chain  # still handed on again after a clear
        assert delegate("call-6").chain == first[6].chain
        assert len(gate._parsed_delegated) <= 3
    finally:
        gate.close()


def test_revoke_holder_reaches_every_grant_past_one_insert_batch(tmp_path: Path) -> None:
    # Kills: GrantRepository.revoke_holder writing only its first batch of 200 ids (a key that
    # holds more grants than that kept the rest alive), and one reporting as "already" revoked
    # what it revoked now.
    root, agent, other = SigningKey.generate(), SigningKey.generate(), SigningKey.generate()
    store = SQLiteStore(tmp_path / "ag.db")
    repo = GrantRepository(store)
    try:
        chains = [issue(root, agent.public, ["tool:lookup"], ttl=600) for _ in range(205)]
        for chain in chains:
            record(repo, chain)
        bystander = issue(root, other.public, ["tool:lookup"], ttl=600)
        record(repo, bystander)
        revoke(repo, chains[100])  # revoked before: reported as such, not again
        done = revoke_holder(repo, agent.did, reason="leaked")
        ids = sorted(c.id for c in chains)
        assert done.already == (chains[100].id,)
        assert sorted((*done.revoked, *done.already)) == ids and len(done.revoked) == 204
        rows = {str(r[0]) for r in store.query("SELECT grant_id FROM agentgate_revocations")}
        assert rows == set(ids)  # every one of the holder's, and not the bystander's
        again = revoke_holder(repo, agent.public)
        assert (again.revoked, again.already) == ((), tuple(ids))
    finally:
        repo.close()
        store.close()


def test_an_entry_edited_in_place_with_its_leaf_hash_is_never_called_a_restore(tmp_path: Path) -> None:
    # Kills: AuditLog.verify calling any unexplained root mismatch a restore (not only at the size
    # only the saved checkpoint has), and the saved checkpoint's size taken as "saved only" when a
    # stored checkpoint has it too. Here the saved checkpoint is the stored one: the log was
    # edited in place (an entry and its leaf hash), not restored from an older copy.
    with SQLiteStore(tmp_path / "a.db") as store:
        log = AuditLog(store, SigningKey(bytes([0x46]) * 32), origin="r46.example/log")
        log.append_many([{"kind": "allow", "principal": "did:key:zA"}] * 4)
        saved = log.checkpoint()
        log.append_many([{"kind": "allow", "principal": "did:key:zB"}] * 2)
        edited = log.entry_bytes(1).replace(b"zA", b"zE")
        with store.transaction() as tx:  # a tamperer with write access to the file
            tx.execute("DROP TRIGGER audit_log_no_update")
            tx.execute(
                "UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = 1", (edited, leaf_hash(edited))
            )
        for report in (log.verify(saved), log.verify()):
            assert not report.ok
            assert any("changed together with its leaf hash" in p for p in report.problems), report.problems
            assert not any("restored" in p or "older copy" in p for p in report.problems), report.problems


def test_an_approval_of_another_call_leaves_the_call_awaiting_approval_and_says_so(tmp_path: Path) -> None:
    # Kills: Gate._approval_invalid without its call-hash check (under a quorum of one, the other
    # call's approval then turned the call into a deny instead of leaving it to be approved).
    import test_gate_leases_and_superseded as second

    from agentgate.gate import Approval

    with SQLiteStore(tmp_path / "s.db") as store:
        made = second.Approvals(store)
        try:
            made.text = made.text.replace("quorum: 2", "quorum: 1")
            made.restart()
            first = made.ask(500, "memo", "v1")
            assert made.ask(900, "memo", "v1", run="t|answer:a2").needs_approval
            wrong = Approval.sign(first.approval_payload(), made.keys["lead"])
            asked = made.ask(900, "memo", "v1", run="t|answer:a2", approval=wrong)
            assert asked.needs_approval, asked.reasons
            assert "approval not counted: it was given for another call" in asked.reasons
        finally:
            made.gate.close()


def test_a_forged_approval_under_a_quorum_of_one_does_not_allow_the_call(tmp_path: Path) -> None:
    # Kills: Gate._approval_invalid without its signature check: an approval naming an approver
    # but signed by another key then allowed the call (quorum one is decided in the gate, with no
    # vote recorded in the store). No other test caught it.
    import dataclasses

    import test_gate_leases_and_superseded as second

    from agentgate.gate import Approval

    with SQLiteStore(tmp_path / "s.db") as store:
        made = second.Approvals(store)
        try:
            made.text = made.text.replace("quorum: 2", "quorum: 1")
            made.restart()
            asked = made.ask(500, "memo", "v1")
            signed = Approval.sign(asked.approval_payload(), SigningKey.generate())
            forged = dataclasses.replace(signed, approver=made.keys["lead"].did)
            again = made.ask(500, "memo", "v1", approval=forged)
            assert again.needs_approval and not again.allowed, again.reasons
            assert f"approval not counted: its signature is not {made.keys['lead'].did}'s" in again.reasons
        finally:
            made.gate.close()
