"""An auditor reconciles the evidence. Every path a call can take through the Gate is
run for real, then the log is read by a reader written from docs/audit-format.md alone (entry
bytes, leaf hashes, RFC 9162 tree, C2SP signed note) and reconciled with the decisions the
callers saw, the budget ledger and the OpenTelemetry spans (the SDK's in-memory exporter):
each decision one entry, each allowed call one outcome that refers to it, the ledger's spend the
sum the entries state, each span's ``agentgate.audit.index`` an entry of its decision. A process
killed between a decision and its outcome leaves a log that verifies and shows the missing
outcome; the command line detects each single-row tampering the reader does."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hashlib
import json
import re
import signal
import sqlite3
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from _raw_sqlite import opened, query
from nacl.signing import VerifyKey
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from test_gate_run import closing_while_running

from agentgate.audit.report import render_report
from agentgate.capabilities import Call
from agentgate.cli.main import main
from agentgate.errors import BrokerError, Denied, SchedulingError, ScopeCreep
from agentgate.gate import Approval, Authorization, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore, Store, open_store
from agentgate.store.audit import AuditLog
from agentgate.store.once import settle

ROOT = Path(__file__).resolve().parents[1]
AGENTGATE = [sys.executable, "-m", "agentgate.cli.main"]
LOG_SEED = b"\x07" * 32
ORIGIN = "agentgate.local/audit"
SEEDS = {name: bytes([n + 1]) * 32 for n, name in enumerate(("root", "boss", "helper", "dana", "erin"))}

POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
principals:
  boss: {{kind: agent, did: "{boss}", roles: [boss]}}
  helper: {{kind: agent, did: "{helper}", roles: [helper]}}
  dana: {{kind: human, did: "{dana}", roles: [owner]}}
  erin: {{kind: human, did: "{erin}", roles: [owner]}}
tools:
  lookup:
    args: {{id: {{type: string, required: true}}}}
    loggable: [id]
    idempotent: true
  explode:
    args: {{}}
  vault:
    args: {{pin: {{type: string, required: true}}}}
  transfer:
    args: {{to: {{type: string, required: true}}}}
    loggable: [to]
  wire:
    args: {{to: {{type: string, required: true}}}}
    loggable: [to]
  limited:
    args: {{}}
    idempotent: true
  slow:
    args: {{}}
    idempotent: true
    timeout_s: 0.1
    retry: {{attempts: 2, backoff_initial_s: 0, retry_on: [timeout]}}
models:
  scripted: {{cost_per_mtok: {{input: 1000000, output: 1000000}}}}
roles:
  boss:
    kind: agent
    capabilities:
      - resource: tool:lookup
      - resource: tool:explode
      - resource: tool:vault
        constraints: {{pin: {{prefix: "12"}}}}
      - resource: tool:transfer
      - resource: tool:wire
      - resource: tool:limited
      - resource: tool:slow
      - resource: model:scripted
    budget: {{limit: 1000, unit: usd_micros}}
    ttl_s: 3600
    delegation:
      max_depth: 1
      max_ttl_s: 600
      capabilities:
        - resource: tool:lookup
        - resource: model:scripted
  helper:
    kind: agent
    capabilities:
      - resource: tool:lookup
      - resource: model:scripted
    ttl_s: 600
  owner:
    kind: human
    capabilities:
      - resource: tool:transfer
    ttl_s: 3600
approvals:
  transfers:
    resource: tool:transfer
    approvers: [dana]
  wires:
    resource: tool:wire
    approvers: [dana, erin]
    quorum: 2
quotas:
  # The longest window (10 years): windows are aligned to the epoch, and an hour's could roll
  # over between the allow of tool:limited and the call that must be refused.
  once-a-decade:
    principal: boss
    window_s: 315360000
    limit: 1
    resources: [tool:limited]
  one-transfer:
    principal: boss
    window_s: 315360000
    limit: 1
    resources: [tool:transfer]
"""


def _keys() -> dict[str, SigningKey]:
    return {name: SigningKey(seed) for name, seed in SEEDS.items()}


def _policy_text() -> str:
    return POLICY.format(**{name: key.did for name, key in _keys().items()})


# --- an independent reader: docs/audit-format.md sections 1 to 3, nothing of agentgate -------------

FIELDS = {
    "v", "index", "time", "kind", "principal", "chain_hash", "policy_hash", "rule", "resource",
    "args_digest", "args", "approver", "budget_delta", "reasons", "status", "ref",
}  # fmt: skip


TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
KINDS = {"allow", "deny", "approval_required", "approval_given", "revoke", "outcome"}  # no spend yet


def _canonical(fields: dict[str, Any]) -> bytes:
    return json.dumps(
        fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode()


def _leaf(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def _tree(leaves: list[bytes]) -> bytes:
    if not leaves:
        return hashlib.sha256(b"").digest()
    if len(leaves) == 1:
        return leaves[0]
    k = 1
    while k * 2 < len(leaves):
        k *= 2
    return hashlib.sha256(b"\x01" + _tree(leaves[:k]) + _tree(leaves[k:])).digest()


def _open_note(note: str, public: bytes) -> tuple[int, bytes]:
    """The size and root of a checkpoint note signed by ``public`` for ``ORIGIN`` (section 3)."""
    text, signatures = note.split("\n\n", 1)
    text += "\n"
    key_id = hashlib.sha256(ORIGIN.encode() + b"\n\x01" + public).digest()[:4]
    for line in signatures.splitlines():
        name, blob_text = line.removeprefix("\u2014 ").rsplit(" ", 1)
        blob = base64.b64decode(blob_text, validate=True)
        if name == ORIGIN and blob[:4] == key_id:
            VerifyKey(public).verify(text.encode(), blob[4:])
            origin, size, root = text.split("\n")[:3]
            assert origin == ORIGIN
            return int(size), base64.b64decode(root, validate=True)
    raise AssertionError("the checkpoint is not signed by the log key")


def _read(store: Store) -> list[dict[str, Any]]:
    """Every entry of the log, checked as section 1 and 2 say: canonical bytes, every field, its
    own index, no gap, the stored leaf hash; then the tree at each stored checkpoint's size is
    the root that checkpoint signs."""
    rows = store.query("SELECT idx, entry, leaf_hash FROM audit_log ORDER BY idx")
    entries, leaves = [], []
    for position, (idx, data, stored) in enumerate(rows):
        data, stored = bytes(data), bytes(stored)
        fields = json.loads(data)
        assert position == idx == fields["index"], (position, idx)
        # ``charges`` (review R61): an outcome's charge to each grant of its chain, when set.
        optional = {"charges"} if fields.get("kind") == "outcome" else set()
        assert FIELDS <= set(fields) <= FIELDS | optional, set(fields) ^ FIELDS
        assert fields["v"] == 1 and TIME.fullmatch(fields["time"])
        assert fields["kind"] in KINDS and 1 <= len(fields["principal"]) <= 512
        assert _canonical(fields) == data, f"entry {idx} is not canonical"
        assert _leaf(data) == stored, f"entry {idx}: stored leaf hash differs"
        entries.append(fields)
        leaves.append(stored)
    public = _did_raw(SigningKey(LOG_SEED).did)
    for (note,) in store.query("SELECT note FROM audit_checkpoints ORDER BY id"):
        size, root = _open_note(str(note), public)
        assert size <= len(leaves) and _tree(leaves[:size]) == root, f"checkpoint at {size} differs"
    return entries


def _did_raw(did: str) -> bytes:
    alphabet = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
    n = 0
    for c in did.removeprefix("did:key:z"):
        n = n * 58 + alphabet.index(c)
    return n.to_bytes(34, "big")[2:]


def _reconcile(entries: list[dict[str, Any]], store: Store) -> dict[int, dict[str, Any]]:
    """Links as the format says (section 1, "What each kind records"), the ledger against the
    entries. Returns the allowed calls with no outcome, by index."""
    by_index = {e["index"]: e for e in entries}
    outcomes: dict[int, list[dict[str, Any]]] = {}
    for entry in entries:
        if entry["kind"] == "outcome":
            allow = by_index[entry["ref"]]
            assert allow["kind"] == "allow" and not allow["resource"].startswith("agent:"), entry
            assert entry["index"] > allow["index"]
            for key in ("principal", "chain_hash", "resource"):
                assert entry[key] == allow[key], (key, entry, allow)
            outcomes.setdefault(entry["ref"], []).append(entry)
        elif entry["kind"] == "approval_given":
            assert entry["ref"] is None or by_index[entry["ref"]]["kind"] == "approval_required"
        elif entry["kind"] == "deny" and entry["ref"] is not None:
            assert by_index[entry["ref"]]["kind"] == "approval_required"
        else:
            assert entry["ref"] is None, entry
    calls = [e for e in entries if e["kind"] == "allow" and not e["resource"].startswith("agent:")]
    for allow in calls:
        # One outcome; a call of a once-only tool that failed may then be settled by a person.
        found = outcomes.get(allow["index"], [])
        assert len(found) <= 1 or (
            len(found) == 2
            and found[0]["status"] == "error"
            and found[1]["reasons"][0].startswith("settled by hand by ")
            and found[1]["budget_delta"] == 0
        ), f"allow {allow['index']} has several outcomes: {found}"
    # The ledger: each grant's committed spend is what the outcomes of its calls state, and what
    # is still reserved is what the allows without an outcome reserved.
    # A delegation's allow names the delegator's grant (chain_hash) and the new one (reasons), and
    # spending at a grant counts against each of its ancestors.
    parent: dict[str, str] = {}
    for entry in entries:
        if entry["kind"] == "allow" and entry["resource"].startswith("agent:"):
            words = entry["reasons"][0].split(" ")
            if words[0] == "delegated":
                parent[words[2]] = entry["chain_hash"]
    # An outcome states its cost; what no budget could cover is the overrun its reasons name.
    spent: Counter[str] = Counter()
    for allow_index, found in outcomes.items():
        for outcome in found:
            if "charges" in outcome:  # each grant's charge, stated (review R61)
                for grant_id, by_unit in outcome["charges"].items():
                    spent[grant_id] += sum(by_unit.values())
                continue
            charged = outcome["budget_delta"]
            for reason in outcome["reasons"]:
                if reason.startswith("overran the "):
                    charged -= int(reason.split(" by ", 1)[1].split(";", 1)[0])
            grant: str | None = by_index[allow_index]["chain_hash"]
            while grant is not None:
                spent[grant] += charged
                grant = parent.get(grant)
    for grant, ledger_spent in store.query("SELECT grant_id, spent FROM budget_ledger"):
        assert int(ledger_spent) == spent[str(grant)], (grant, ledger_spent, spent)
    open_calls = {a["index"]: a for a in calls if a["index"] not in outcomes}
    held = sorted(
        int(r[0]) for r in store.query("SELECT amount FROM budget_reservations WHERE state = 'reserved'")
    )
    assert held == sorted(a["budget_delta"] for a in open_calls.values() if a["budget_delta"])
    return open_calls


def _span_links(exporter: InMemorySpanExporter, entries: list[dict[str, Any]]) -> set[int]:
    """Each span's audit index names an entry of the span's decision and resource, each span
    with a decision has one, and no two spans name the same entry: exactly one span per entry
    it links (a refused delegation counted by span is counted once); the indexes. A grant entry
    (``agent:NAME``) is linked by the span ``Gate.issue`` or ``Gate.delegate`` made, naming the
    entry's principal as issuer and the grant the entry names (under LangGraph, the tool call
    that asked for it carries no decision of its own); a ``revoke`` entry by the ``revoke grant``
    span of ``Gate.revoke`` or ``Gate.revoke_holder``, naming the grant and who revoked it; an
    ``approval_given`` entry by an ``approve RESOURCE`` span naming the approver and the request;
    a GPU lease's decision by a ``lease gpu:TYPE`` span and each of its outcomes by a ``STATUS
    gpu:TYPE`` span of its own; a call's span ends as its first outcome says: ERROR for an
    ``error``, ``agentgate.outcome`` as recorded. Every entry but a call's outcome (on its call's
    span) is linked: an act of authority or a refusal with no span is missed by whoever counts
    them by span."""
    outcomes: dict[int, dict[str, Any]] = {}
    for entry in entries:
        if entry["kind"] == "outcome":
            outcomes.setdefault(entry["ref"], entry)
    linked, granted = Counter[int](), set()
    for span in exporter.get_finished_spans():
        attributes = dict(span.attributes or {})
        if "agentgate.audit.index" not in attributes:
            # An approval request asked again by the same call (LangGraph re-runs a node when it
            # resumes) links none: the span of its first asking links its one entry.
            assert attributes.get("agentgate.decision", "approval_required") == "approval_required", (
                span.name,
                attributes,
            )
            continue
        index = int(attributes["agentgate.audit.index"])
        entry = entries[index]
        linked[index] += 1
        if entry["kind"] == "revoke":
            assert span.name == "revoke grant" and "agentgate.decision" not in attributes, span.name
            assert attributes["agentgate.capability.id"] == entry["chain_hash"]
            assert attributes["agentgate.revoke.by"] == entry["principal"]
            assert attributes["agentgate.revoke.already"] is False
            continue
        if entry["kind"] == "approval_given":
            assert span.name == f"approve {entry['resource']}" and "agentgate.decision" not in attributes
            assert attributes["agentgate.approval.approver"] == entry["principal"]
            assert f"request:{attributes['agentgate.approval.request']}" == entry["reasons"][0]
            continue
        if entry["kind"] == "outcome":  # a GPU lease's, on a span of its own
            assert span.name == f"{entry['status']} {entry['resource']}", (span.name, entry)
            assert "agentgate.decision" not in attributes and attributes["agentgate.action"] == "lease"
            assert attributes["agentgate.outcome"] == entry["status"]
            assert attributes.get("agentgate.audit.ref") == entry["ref"]
            assert (span.status.status_code == StatusCode.ERROR) == (entry["status"] == "error"), span.name
            continue
        assert entry["kind"] == attributes["agentgate.decision"], (span.name, entry)
        kind, _, name = entry["resource"].partition(":")
        if kind == "agent":
            action = attributes["agentgate.action"]
            assert span.name == f"{action} agent:{name}" and action in ("issue", "delegate"), span.name
            assert attributes["agentgate.resource"] == entry["resource"]
            assert attributes["agentgate.grant.issuer"] == entry["principal"]
            if action == "delegate":  # the entry names the grant delegated from
                assert attributes.get("agentgate.grant.parent") == entry["chain_hash"]
            if entry["kind"] == "allow":  # "issued grant ID to ..." / "delegated grant ID to ..."
                words = entry["reasons"][0].split(" ")
                assert words[0] == {"issue": "issued", "delegate": "delegated"}[action], entry
                assert attributes["agentgate.capability.id"] == words[2]
            granted.add(index)
            continue
        spans = {"tool": f"execute_tool {name}", "model": f"chat {name}", "gpu": f"lease {entry['resource']}"}
        assert span.name == spans[kind], (span.name, entry)
        assert attributes.get("agentgate.capability.id") == entry["chain_hash"]
        outcome = outcomes.get(index)
        if entry["kind"] == "allow" and outcome is not None and kind != "gpu":
            assert (span.status.status_code == StatusCode.ERROR) == (outcome["status"] == "error"), (
                span.name,
                outcome,
            )
            assert attributes.get("agentgate.outcome", outcome["status"]) == outcome["status"]
    twice = sorted(i for i, n in linked.items() if n > 1)
    assert not twice, f"entries linked by more than one span: {twice}"
    grants = {i for i in linked if (entries[i]["resource"] or "").startswith("agent:")}
    assert grants <= granted, f"grant entries without their grant span: {sorted(grants - granted)}"
    unlinked = [
        (e["index"], e["kind"], e["resource"])
        for e in entries
        if e["index"] not in linked and not (e["kind"] == "outcome" and not e["resource"].startswith("gpu:"))
    ]
    assert not unlinked, f"entries no span links: {unlinked}"
    return set(linked)


# --- every path through the Gate API --------------------------------------------------------------


def _traced_gate(store: Store) -> tuple[Gate, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    policy = parse_policy(_policy_text(), source="r27.yaml")
    gate = Gate(policy, store, log_key=SigningKey(LOG_SEED), tracer=provider.get_tracer("r27"))
    return gate, exporter


def _boom() -> None:
    raise RuntimeError("tool failed")


def test_every_path_through_the_gate_reconciles_with_ledger_and_spans(store: Store) -> None:
    gate, exporter = _traced_gate(store)
    keys = _keys()
    seen: list[tuple[str, Authorization]] = []  # what each caller was told, with the kind expected

    def decide(kind: str, call: Call, **kw: Any) -> Authorization:
        auth = gate.authorize(boss, call, **kw)
        assert auth.verdict == kind, (call.resource, auth.verdict, auth.reasons)
        seen.append((kind, auth))
        return auth

    def run(call: Call, fn: Callable[[], Any], **kw: Any) -> None:
        auth = decide("allow", call, tokens=kw.pop("tokens", None))
        with contextlib.suppress(RuntimeError):
            gate.run(auth, fn, **kw)

    try:
        boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
        run(Call.tool("lookup", {"id": "1"}), lambda: "found")  # allow + ok
        run(Call.tool("explode", {}), _boom)  # allow + tool error
        run(Call.tool("lookup", {"id": "2"}), lambda: "no such id", failed=lambda _: True)
        decide("deny", Call.tool("vault", {"pin": "99"}))  # refused by the grant's constraint
        decide("deny", Call.tool("nosuch", {}))  # refused by the policy
        run(Call.tool("limited", {}), lambda: "x")
        decide("deny", Call.tool("limited", {}))  # quota exhausted
        run(Call.model("scripted", {}), lambda: "hi", tokens=(100, 200), spent=lambda _: (50, 20))
        # a model call that used more than the budget had left: its cost is recorded all the same
        # (a prompt longer than estimated: output is never charged over the max reserved)
        run(Call.model("scripted", {}), lambda: "long", tokens=(10, 10), spent=lambda _: (1190, 10))
        decide("deny", Call.model("scripted", {}), tokens=(1, 1))  # budget exhausted
        # a once-only tool that failed, then settled by a person: a second outcome
        once = decide("allow", Call.tool("explode", {}), call_id="e1")
        with pytest.raises(RuntimeError):
            gate.run(once, _boom, call_id="e1")
        gate.flush()
        ((key,),) = store.query("SELECT key FROM agentgate_once WHERE state = 'error'")
        settle(store, gate.audit, key, ran=False, by="r27", reason="no effect")
        asked = decide("approval_required", Call.tool("transfer", {"to": "x"}), call_id="t1")
        approved = decide(
            "allow",
            Call.tool("transfer", {"to": "x"}),
            call_id="t1",
            approval=Approval.sign(dict(asked.request or {}), keys["dana"]),
        )
        gate.run(approved, lambda: "sent", call_id="t1")
        asked = decide("approval_required", Call.tool("transfer", {"to": "y"}), call_id="t2")
        seen.append(("deny", gate.decline(asked)))  # approval refused

        async def cancelled() -> None:  # allow + cancelled while it ran
            auth = decide("allow", Call.tool("lookup", {"id": "c"}))
            task = asyncio.ensure_future(gate.arun(auth, lambda: asyncio.sleep(5)))
            await asyncio.sleep(0.05)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

        async def timed_out() -> None:  # allow + every attempt past its deadline: one outcome
            auth = decide("allow", Call.tool("slow", {}))
            with pytest.raises(Exception, match=r"deadline|timed out|Deadline"):
                await gate.arun(auth, lambda: asyncio.sleep(5))

        asyncio.run(cancelled())
        asyncio.run(timed_out())
        gate.abandon(decide("allow", Call.tool("lookup", {"id": "a"})))  # allow, never run
        helper = gate.delegate(
            boss, name="helper", key=keys["helper"], capabilities=["tool:lookup"], ttl=timedelta(minutes=5)
        )
        with pytest.raises(ScopeCreep, match="hand on"):
            gate.delegate(
                boss,
                name="helper",
                key=keys["helper"],
                capabilities=["tool:explode"],
                ttl=timedelta(minutes=5),
            )
        with pytest.raises(Denied, match="no identity"):  # a delegation from nobody
            gate.delegate(
                None,
                name="helper",
                key=keys["helper"],
                capabilities=["tool:lookup"],
                ttl=timedelta(minutes=5),
            )
        with pytest.raises(Denied, match="not a trust anchor"):  # an issue by a key rotated out
            gate.issue(SigningKey(b"\x09" * 32), name="rogue", key=keys["helper"], role="helper")
        during = decide("allow", Call.tool("lookup", {"id": "r"}))
        gate.run(during, lambda: gate.revoke(boss, reason="revoked mid-run"))
        decide("deny", Call.tool("lookup", {"id": "z"}))  # revoked
        assert gate.revoke(boss, by="r27").already  # nothing written: a span without an entry
        dana = gate.issue(keys["root"], name="dana", key=keys["dana"], role="owner")
        assert gate.revoke_holder(keys["dana"].public, by="r27").revoked == (dana.grant_id,)
        gate.flush()
        gate.audit.checkpoint()
        entries = _read(store)
        assert gate.audit.verify().ok
        for kind, auth in seen:
            entry = entries[auth.audit_index or 0]
            assert auth.audit_index is not None and entry["kind"] == kind, (kind, entry)
            assert entry["resource"] == auth.call.resource and entry["principal"] == auth.identity.did
        decided = [e["index"] for e in entries if e["kind"] in ("allow", "deny", "approval_required")]
        grants = {e["index"] for e in entries if (e["resource"] or "").startswith("agent:")}
        # each call decision is exactly the one entry its caller was told of; grants are the others
        assert sorted(a.audit_index or 0 for _, a in seen) == sorted(set(decided) - grants)
        assert helper.audit_index in grants
        assert _reconcile(entries, store) == {}
        page = render_report(gate.audit.entries(), None, ())
        assert "Every allowed call has its outcome." in page
        statuses = Counter(e["status"] for e in entries if e["kind"] == "outcome")
        assert statuses == {"ok": 6, "error": 6, "not_run": 1}
        (overrun,) = [e for e in entries if any(r.startswith("overran") for r in e["reasons"])]
        assert overrun["budget_delta"] == 1200 and store.query("SELECT spent FROM budget_ledger") == [(1000,)]
        revoked = {e["index"] for e in entries if e["kind"] == "revoke"}
        assert len(revoked) == 2
        (given,) = [e["index"] for e in entries if e["kind"] == "approval_given"]  # dana's yes
        assert _span_links(exporter, entries) == set(decided) | revoked | {given}
        (again,) = [
            s
            for s in exporter.get_finished_spans()
            if s.name == "revoke grant" and dict(s.attributes or {}).get("agentgate.revoke.already")
        ]
        assert "agentgate.audit.index" not in dict(again.attributes or {})
    finally:
        gate.close()


def test_calls_settled_without_running_while_the_gate_closes_reconcile(tmp_path: Path) -> None:
    """Allows that never run, refused by ``run`` once ``close`` began or abandoned, each have
    their outcome and a span that says it, as calls that ran do."""
    gate, exporter = _traced_gate(SQLiteStore(tmp_path / "agentgate.db"))
    keys = _keys()
    boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
    first = gate.authorize(boss, Call.tool("lookup", {"id": "1"}))
    late = gate.authorize(boss, Call.model("scripted", {}), tokens=(10, 10))
    dropped = gate.authorize(boss, Call.tool("lookup", {"id": "2"}))
    with closing_while_running(gate, first):
        with pytest.raises(SchedulingError):
            gate.run(late, lambda: "late")
        gate.abandon(dropped)
    store = SQLiteStore(tmp_path / "agentgate.db")
    try:
        entries = _read(store)
        assert _reconcile(entries, store) == {}
        statuses = {e["ref"]: e["status"] for e in entries if e["kind"] == "outcome"}
        assert statuses == {first.audit_index: "ok", late.audit_index: "error", dropped.audit_index: "error"}
        decided = {e["index"] for e in entries if e["kind"] in ("allow", "deny", "approval_required")}
        assert _span_links(exporter, entries) == decided
    finally:
        store.close()


def test_approvals_given_and_superseded_requests_are_each_linked_by_one_span(tmp_path: Path) -> None:
    """Review R54: an approver's counted yes (``approval_given``) and the ``deny`` that closes a
    superseded approval request had no span; each is now linked by one."""
    gate, exporter = _traced_gate(SQLiteStore(tmp_path / "agentgate.db"))
    keys = _keys()
    try:
        boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")

        def ask(to: str, version: str, approval: Approval | None = None) -> Authorization:
            call = Call.tool("wire", {"to": to})
            return gate.authorize(boss, call, call_id="w1", asked_in=("thread", version), approval=approval)

        first = ask("x", "v1")
        # The answer that asked for w1 was edited: asked for again, its first request is closed.
        asked = ask("y", "v2")
        assert first.needs_approval and asked.needs_approval
        payload = dict(asked.request or {})
        assert ask("y", "v2", Approval.sign(payload, keys["dana"])).needs_approval  # one yes of two
        approved = ask("y", "v2", Approval.sign(payload, keys["erin"]))
        assert approved.allowed
        gate.run(approved, lambda: "wired", call_id="w1")
        gate.flush()
        entries = _read(gate.store)
        assert _reconcile(entries, gate.store) == {}
        (superseded,) = [e for e in entries if e["kind"] == "deny"]
        assert superseded["ref"] == first.audit_index and superseded["args"] == {"to": "x"}
        given = [e for e in entries if e["kind"] == "approval_given"]
        assert [e["principal"] for e in given] == [keys["dana"].did, keys["erin"].did]
        assert _span_links(exporter, entries) == {e["index"] for e in entries if e["kind"] != "outcome"}
        (closed,) = [s for s in exporter.get_finished_spans() if s.status.status_code == StatusCode.ERROR]
        assert closed.name == "execute_tool wire" and "superseded" in (closed.status.description or "")
    finally:
        gate.close()


def test_requests_closed_by_a_revocation_are_each_linked_by_one_span(tmp_path: Path) -> None:
    """Review R55: a revocation closes the approval requests it makes void, each with a ``deny``
    entry referring to its ``approval_required`` entry; each such entry is linked by one span
    (a refused call's, as a superseded request's), and so is the refusal of the call resumed
    after it."""
    gate, exporter = _traced_gate(SQLiteStore(tmp_path / "agentgate.db"))
    keys = _keys()
    try:
        boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
        wire = Call.tool("wire", {"to": "x"})
        asked = gate.authorize(boss, wire, call_id="w1", asked_in=("thread", "v1"))
        assert asked.needs_approval
        gate.revoke(boss, reason="key leaked")
        refused = gate.authorize(boss, wire, call_id="w1", asked_in=("thread", "v1"))
        assert not refused.allowed and not refused.needs_approval
        gate.flush()
        entries = _read(gate.store)
        assert _reconcile(entries, gate.store) == {}
        closing = [e for e in entries if e["kind"] == "deny"]
        assert [e["ref"] for e in closing] == [asked.audit_index, asked.audit_index]
        assert _span_links(exporter, entries) == {e["index"] for e in entries if e["kind"] != "outcome"}
        errors = [s for s in exporter.get_finished_spans() if s.status.status_code == StatusCode.ERROR]
        assert [s.name for s in errors] == ["execute_tool wire", "execute_tool wire"]
        assert "is void" in (errors[0].status.description or "")
    finally:
        gate.close()


def test_a_yes_rolled_back_with_its_refused_call_has_no_span(tmp_path: Path) -> None:
    """Review R54: the span of an approval used with the call's allow is made once the allow
    commits; a yes whose call is then refused (its quota full) is rolled back with it, and no
    span links an entry that is not in the log."""
    gate, exporter = _traced_gate(SQLiteStore(tmp_path / "agentgate.db"))
    keys = _keys()
    try:
        boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
        for call_id, allowed in (("t1", True), ("t2", False)):  # one transfer a decade
            call = Call.tool("transfer", {"to": call_id})
            asked = gate.authorize(boss, call, call_id=call_id)
            approval = Approval.sign(dict(asked.request or {}), keys["dana"])
            auth = gate.authorize(boss, call, call_id=call_id, approval=approval)
            assert auth.allowed is allowed and (allowed or auth.quota_exceeded == "one-transfer")
            if allowed:
                gate.run(auth, lambda: "sent", call_id=call_id)
        gate.flush()
        entries = _read(gate.store)
        assert [e["index"] for e in entries if e["kind"] == "approval_given"] == [2]  # t1's, before its allow
        assert _span_links(exporter, entries) == {e["index"] for e in entries if e["kind"] != "outcome"}
        assert len([s for s in exporter.get_finished_spans() if s.name == "approve tool:transfer"]) == 1
    finally:
        gate.close()


def test_every_gpu_lease_decision_and_outcome_is_linked_by_one_span(tmp_path: Path) -> None:
    """Review R54: an allowed GPU lease or renewal, and every outcome of a lease, had no span
    (only a refused lease had one); each is now linked by a span of its own."""
    from test_broker_gated import Setup

    from agentgate.dispatch.broker import GangRequest

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    setup = Setup(tmp_path, tracer=provider.get_tracer("r54"))
    try:
        trainer = setup.ids["trainer"]
        assert setup.gated.submit(trainer, GangRequest("ft-1", "x", 8, gpu_type="H100")).allowed
        assert not setup.gated.submit(setup.ids["chat"], GangRequest("ft-2", "x", 8, gpu_type="H100")).allowed
        with pytest.raises(BrokerError, match="already live"):  # allowed, then refused: an error outcome
            setup.gated.submit(setup.ids["other"], GangRequest("ft-1", "x", 8, gpu_type="H100"))
        setup.clock.now += 30
        setup.gated.renew(trainer, "ft-1")
        setup.gated.release(trainer, "ft-1")
        setup.gate.flush()
        entries = _read_any(setup.gate.store)
        leases = [(e["kind"], e["status"]) for e in entries if e["resource"] == "gpu:h100"]
        assert leases == [
            ("allow", None),
            ("outcome", "lease_granted"),
            ("deny", None),
            ("allow", None),
            ("outcome", "error"),
            ("allow", None),
            ("outcome", "lease_released"),
        ]
        expected = {e["index"] for e in entries if e["kind"] != "outcome" or e["resource"] == "gpu:h100"}
        assert _span_links(exporter, entries) == expected
    finally:
        setup.gate.close()


# --- a process killed between a decision and its outcome ------------------------------------------

CHILD = """
import sys, time
from pathlib import Path
sys.path.insert(0, {tests!r})
from test_audit_reconciliation import LOG_SEED, _keys, _policy_text
from agentgate.capabilities import Call
from agentgate.gate import Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import open_store

keys = _keys()
gate = Gate(parse_policy(_policy_text(), source="r27.yaml"), open_store({db!r}), log_key=SigningKey(LOG_SEED))
boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
gate.run(gate.authorize(boss, Call.tool("lookup", {{"id": "1"}})), lambda: "found")
auth = gate.authorize(boss, Call.model("scripted", {{}}), tokens=(100, 200))
gate.audit.checkpoint()

def hang():
    print(auth.audit_index, flush=True)
    time.sleep(60)

gate.run(auth, hang)
"""


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """``agentgate ARGV`` run in this process (a subprocess costs seconds on a loaded machine):
    its exit code and what it printed."""
    capsys.readouterr()
    code = main(list(argv))
    printed = capsys.readouterr()
    assert "Traceback" not in printed.err
    return code, printed.out + printed.err


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def crashed(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, int]]:
    """A log whose writer was SIGKILLed while a model call ran (its allow recorded and
    checkpointed, its outcome never written): its store URL, and the running call's index."""
    db = (
        str(tmp_path / "agentgate.db")
        if request.param == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD.format(tests=str(ROOT / "tests"), db=db)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        assert child.stdout is not None
        running = int(child.stdout.readline())
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        if child.stdout is not None:
            child.stdout.close()
    (tmp_path / "log.pub").write_text(SigningKey(LOG_SEED).did + "\n")
    yield db, running


def test_a_call_whose_process_was_killed_shows_as_a_call_without_outcome(
    crashed: tuple[str, int], capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    db, running = crashed
    store = open_store(db)
    try:
        entries = _read(store)
        open_calls = _reconcile(entries, store)  # the held reservation is the open allow's
        assert list(open_calls) == [running] and open_calls[running]["budget_delta"] == 300
        log = AuditLog(store, SigningKey(LOG_SEED))
        assert log.verify().ok
    finally:
        store.close()
    # A restarted process goes on writing on top of it: the log still verifies and reconciles,
    # and the lost call's reservation is still held.
    gate = Gate(parse_policy(_policy_text(), source="r27.yaml"), open_store(db), log_key=SigningKey(LOG_SEED))
    try:
        boss = gate.issue(_keys()["root"], name="boss", key=_keys()["boss"], role="boss")
        gate.run(gate.authorize(boss, Call.model("scripted", {}), tokens=(10, 10)), lambda: "hi")
        gate.flush()
        gate.audit.checkpoint()
        assert gate.audit.verify().ok
        assert list(_reconcile(_read(gate.store), gate.store)) == [running]
        page = render_report(gate.audit.entries(), None, ())
    finally:
        gate.close()
    pub = str(tmp_path / "log.pub")
    code, printed = _cli(capsys, "audit", "verify", "--store", db, "--key", pub)
    assert code == 0, printed
    code, printed = _cli(capsys, "audit", "explain", str(running), "--store", db, "--key", pub)
    assert code == 0 and "no outcome found" in printed
    # The report an auditor reads names the call that never settled and what it holds, instead
    # of a burn-down that simply lacks it.
    assert "<h2>Allowed calls without an outcome</h2>" in page
    section = page.split("<h2>Allowed calls without an outcome</h2>", 1)[1].split("<h2>", 1)[0]
    assert "1 allowed calls have no outcome" in section and "300 in all" in section
    assert f"<tr><td>{running}</td>" in section and "model:scripted" in section


# --- single-row tampering: the command line and the reader agree ----------------------------------


def _leaf_sql(data: bytes) -> bytes:
    return _leaf(data)


TAMPERING: dict[str, Callable[[sqlite3.Connection, int], None]] = {
    # an outcome's status changed, its stored leaf hash left
    "edit": lambda db, n: db.execute(
        'UPDATE audit_log SET entry = CAST(replace(CAST(entry AS TEXT), \'"status":"ok"\', '
        '\'"status":"no"\') AS BLOB) WHERE idx = 2'
    ),
    # the same with the leaf hash recomputed: only the signed root tells
    "edit-rehashed": lambda db, n: _rewrite(db, 2, lambda e: e.replace(b'"status":"ok"', b'"status":"no"')),
    "delete": lambda db, n: db.execute("DELETE FROM audit_log WHERE idx = 2"),
    # an allow and its outcome swapped, leaf hashes with them
    "reorder": lambda db, n: _swap(db, 1, 2),
    "truncate-tail": lambda db, n: db.execute("DELETE FROM audit_log WHERE idx >= ?", (n - 2,)),
}


def _rewrite(db: sqlite3.Connection, idx: int, change: Callable[[bytes], bytes]) -> None:
    (data,) = db.execute("SELECT entry FROM audit_log WHERE idx = ?", (idx,)).fetchone()
    changed = change(bytes(data))
    db.execute("UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = ?", (changed, _leaf(changed), idx))


def _swap(db: sqlite3.Connection, a: int, b: int) -> None:
    rows = {
        i: db.execute("SELECT entry, leaf_hash FROM audit_log WHERE idx = ?", (i,)).fetchone() for i in (a, b)
    }
    for i, j in ((a, b), (b, a)):
        db.execute("UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = ?", (*rows[j], i))


@pytest.fixture(scope="module")
def signed_log(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, str]:
    """A log the Gate wrote (decisions and outcomes), checkpointed; its size and the saved note."""
    tmp = tmp_path_factory.mktemp("signed")
    store = SQLiteStore(tmp / "agentgate.db")
    gate = Gate(parse_policy(_policy_text(), source="r27.yaml"), store, log_key=SigningKey(LOG_SEED))
    try:
        keys = _keys()
        boss = gate.issue(keys["root"], name="boss", key=keys["boss"], role="boss")
        for n in range(3):
            gate.run(gate.authorize(boss, Call.tool("lookup", {"id": str(n)})), lambda: "found")
            gate.flush()
        gate.authorize(boss, Call.tool("vault", {"pin": "99"}))
        note = gate.audit.checkpoint()
        size = gate.audit.size()
    finally:
        gate.close()
    (tmp / "log.pub").write_text(SigningKey(LOG_SEED).did + "\n")
    (tmp / "saved.note").write_text(note)
    return tmp / "agentgate.db", size, note


@pytest.mark.parametrize("attack", sorted(TAMPERING))
def test_each_single_row_tampering_is_found_by_the_reader_and_the_command_line(
    signed_log: tuple[Path, int, str], tmp_path: Path, attack: str, capsys: pytest.CaptureFixture[str]
) -> None:
    original, size, _note = signed_log
    assert json.loads(query(original, "SELECT entry FROM audit_log WHERE idx = 2")[0][0])["status"] == "ok"
    copy = tmp_path / "agentgate.db"
    with opened(original) as source, opened(copy) as target:
        source.backup(target)
    db = sqlite3.connect(copy)
    for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        db.execute(f"DROP TRIGGER {name}")
    TAMPERING[attack](db, size)
    db.commit()
    db.close()
    store = SQLiteStore(copy)
    try:
        with pytest.raises(AssertionError):
            _read(store)
    finally:
        store.close()
    pub = str(original.parent / "log.pub")
    code, printed = _cli(capsys, "audit", "verify", "--store", str(copy), "--key", pub)
    assert code == 1, (attack, printed)


def test_a_tail_cut_with_its_checkpoints_is_found_with_the_saved_checkpoint(
    signed_log: tuple[Path, int, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original, size, note = signed_log
    copy = tmp_path / "agentgate.db"
    with opened(original) as source, opened(copy) as target:
        source.backup(target)
    db = sqlite3.connect(copy)
    for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall():
        db.execute(f"DROP TRIGGER {name}")
    db.execute("DELETE FROM audit_log WHERE idx >= ?", (size - 2,))
    db.execute("DELETE FROM audit_checkpoints")
    db.commit()
    db.close()
    store = SQLiteStore(copy)
    try:
        entries = _read(store)  # what is left is consistent on its own...
        public = _did_raw(SigningKey(LOG_SEED).did)
        saved_size, _root = _open_note(note, public)
        assert len(entries) < saved_size  # ...but shorter than the tree signed outside the database
    finally:
        store.close()
    pub = str(original.parent / "log.pub")
    # The entries left verify; the triggers the attack dropped are reported (since review R56).
    code, printed = _cli(capsys, "audit", "verify", "--store", str(copy), "--key", pub)
    assert code == 1 and "the entries verify" in printed and "audit_log_no_delete" in printed, printed
    saved = original.parent / "saved.note"
    code, printed = _cli(
        capsys, "audit", "verify", "--store", str(copy), "--key", pub, "--checkpoint", str(saved)
    )
    assert code == 1 and str(size - 2) in printed, printed


# --- the LangGraph middleware and the gateway over HTTP -------------------------------------------


def test_a_langgraph_run_with_delegation_approval_and_pause_reconciles(tmp_path: Path) -> None:
    from langchain_core.messages import AIMessage
    from langchain_core.tools import StructuredTool
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.types import Command, interrupt
    from test_observability import Sweep, _calls

    from agentgate.integrations.langgraph import ScriptedChatModel, create_gated_agent, delegation_tool

    sweep = Sweep(tmp_path)
    try:

        def lookup(id: str, secret: str = "") -> str:
            if id == "ask":  # a tool that waits for a person: paused, then run again on resume
                return f"found {interrupt({'question': 'which?'})}"
            return f"found {id}"

        tools = [
            *sweep.tools()[1:],
            StructuredTool.from_function(func=lookup, name="lookup", description="l"),
        ]
        helper = create_gated_agent(
            sweep.gate,
            name="helper",
            model=ScriptedChatModel(turns=[_calls(("lookup", {"id": "h"})), AIMessage(content="helped")]),
            tools=[tools[-1]],
        )
        ask = delegation_tool(
            sweep.gate,
            name="helper",
            agent=helper,
            key=sweep.keys["helper"],
            capabilities=["tool:lookup", "model:scripted"],
            ttl=timedelta(minutes=5),
        )
        model = ScriptedChatModel(
            turns=[
                _calls(
                    ("ask_helper", {"task": "t"}), ("explode", {"password": "pw"}), ("vault", {"pin": "99"})
                ),
                _calls(("transfer", {"to": "acct"})),
                _calls(("lookup", {"id": "ask"})),
                AIMessage(content="done"),
            ]
        )
        boss = create_gated_agent(
            sweep.gate, name="boss", model=model, tools=[*tools, ask], checkpointer=InMemorySaver()
        )
        config: Any = {"configurable": {"thread_id": "r27"}}
        paused = boss.invoke({"messages": [{"role": "user", "content": "go"}]}, config, context=sweep.boss)
        approval = Approval.sign(paused["__interrupt__"][0].value, sweep.keys["dana"]).to_dict()
        paused = boss.invoke(Command(resume=approval), config, context=sweep.boss)
        assert paused["__interrupt__"][0].value == {"question": "which?"}
        done = boss.invoke(Command(resume="this one"), config, context=sweep.boss)
        assert done["messages"][-1].content == "done"
        sweep.gate.flush()
        entries = _read_any(sweep.gate.store)
        assert _reconcile(entries, sweep.gate.store) == {}
        statuses = Counter(e["status"] for e in entries if e["kind"] == "outcome")
        assert statuses["paused"] == 1 and statuses["error"] == 1
        decided = {e["index"] for e in entries if e["kind"] in ("allow", "deny", "approval_required")}
        given = {e["index"] for e in entries if e["kind"] == "approval_given"}
        assert len(given) == 1 and _span_links(sweep.exporter, entries) == decided | given
    finally:
        sweep.gate.close()


def _read_any(store: Store) -> list[dict[str, Any]]:
    """``_read`` for a log whose key is not ``LOG_SEED`` (no checkpoint is read)."""
    assert not store.query("SELECT 1 FROM audit_checkpoints")
    return _read(store)


@dataclass(frozen=True)
class TracedGateway:
    """A gateway served over HTTP on 127.0.0.1 with its spans kept in memory (``traced_gateway``)."""

    gate: Any  # GatewayGate
    url: str
    backend: Any  # test_gateway_end_to_end._Scripted: its ``mode`` says how it answers
    exporter: InMemorySpanExporter
    keys: dict[str, SigningKey]


@contextlib.contextmanager
def traced_gateway(tmp_path: Path) -> Iterator[TracedGateway]:
    """A ``GatewayGate`` over test_gateway's policy (a SQLite file under ``tmp_path``, fresh keys),
    its spans in an in-memory exporter, serving a scripted backend. On exit the server and the
    backend stop (the backend's mode back to ``ok``); the gate stays open for its log to be read:
    closing it is the caller's."""
    from test_gateway import MODEL, NAMES
    from test_gateway import _policy_text as gateway_policy
    from test_gateway_end_to_end import _Scripted

    from agentgate.dispatch import inventory_from_mapping
    from agentgate.dispatch.gateway import Gateway, GatewayGate, GatewayServer

    backend = _Scripted().start()
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    keys = {n: SigningKey.generate() for n in NAMES}
    policy = parse_policy(gateway_policy({n: k.did for n, k in keys.items()}), source="gateway.yaml")
    gate = GatewayGate(policy, SQLiteStore(tmp_path / "g.db"), tracer=provider.get_tracer("r27"))
    inventory = inventory_from_mapping(
        {"backends": [{"name": "scripted", "url": backend.url, "engine": "vllm", "models": [MODEL]}]}
    )
    server = GatewayServer(Gateway(gate, inventory), port=0).start()
    try:
        yield TracedGateway(gate, server.url, backend, exporter, keys)
    finally:
        backend.mode = "ok"
        server.stop()
        backend.stop()


def test_gateway_requests_over_http_reconcile(tmp_path: Path) -> None:
    import _http
    from test_gateway import MODEL, OTHER

    from agentgate.dispatch.gateway import invocation_headers

    with traced_gateway(tmp_path) as served:
        gate, backend, keys = served.gate, served.backend, served.keys
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="chat")
        poor = gate.issue(keys["root"], name="poor", key=keys["poor"], role="thrifty")
        url = f"{served.url}/chat/completions"
        answers = []
        for mode, extra, who in [
            ("ok", {}, agent),
            ("ok", {"max_tokens": 600}, agent),  # refused by the grant
            ("ok", {"model": OTHER, "max_tokens": 200}, agent),  # approval required
            ("ok", {"model": OTHER}, agent),  # allowed, no backend serves it: 404 (503 until R53)
            ("die", {"stream": True}, agent),  # a stream the backend cut after output
            ("ok", {"stream": True}, agent),
            ("ok", {"max_tokens": 200}, poor),  # budget exhausted
        ]:
            backend.mode = mode
            body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, **extra}
            headers = invocation_headers(who.key, who.chain, body)
            answers.append(_http.post(url, json=body, headers=headers, timeout=10).status_code)
            if mode == "ok" and not extra:  # the same invocation again: a replay
                answers.append(_http.post(url, json=body, headers=headers, timeout=10).status_code)
        answers.append(
            _http.post(url, json=body, headers={"Authorization": "Bearer ag1.x"}, timeout=10).status_code
        )
    try:
        gate.flush()
        entries = _read_any(gate.store)
        assert answers == [200, 401, 403, 403, 404, 200, 200, 402, 401]
        assert _reconcile(entries, gate.store) == {}
        calls = [e for e in entries if not (e["resource"] or "").startswith("agent:")]
        decisions = [e for e in calls if e["kind"] in ("allow", "deny", "approval_required")]
        assert len(decisions) == len(answers)  # one entry per request, unidentified callers' too
        assert Counter(e["status"] for e in calls if e["kind"] == "outcome") == {"ok": 2, "error": 2}
        linked = _span_links(served.exporter, entries)  # the grants' too
        assert linked == {e["index"] for e in entries if e["kind"] in ("allow", "deny", "approval_required")}
    finally:
        gate.close()


# --- the RFC 6962 vectors through the package's public proof API ----------------------------------

VECTORS = ROOT.parent / "shared" / "vectors" / "rfc6962"
SAMPLE = ["", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f"]


def test_every_rfc6962_vector_through_the_public_proof_api() -> None:
    """``agentgate.audit``'s exported verifiers give each case its expected result, and the
    proofs it builds for the RFC sample tree are the vectors' own, byte for byte."""
    import agentgate.audit as public
    from agentgate.errors import TamperDetected

    leaves = [_leaf(bytes.fromhex(h)) for h in SAMPLE]
    cases = sorted(VECTORS.rglob("*.json"))
    assert len(cases) == 196
    built = 0
    for path in cases:
        case = json.loads(path.read_text())
        proof = [base64.b64decode(p) for p in case["proof"] or []]
        check: Callable[[], None]
        if "leafIdx" in case:
            leaf, root = base64.b64decode(case["leafHash"] or ""), base64.b64decode(case["root"] or "")
            check = functools.partial(
                public.verify_inclusion, leaf, case["leafIdx"], case["treeSize"], proof, root
            )
            if not case["wantErr"] and case["treeSize"] <= len(leaves) and leaf == leaves[case["leafIdx"]]:
                assert public.inclusion_proof(leaves, case["leafIdx"], case["treeSize"]) == proof, path
                assert _tree(leaves[: case["treeSize"]]) == root
                built += 1
        else:
            root1, root2 = base64.b64decode(case["root1"] or ""), base64.b64decode(case["root2"] or "")
            check = functools.partial(
                public.verify_consistency, case["size1"], case["size2"], proof, root1, root2
            )
            if not case["wantErr"] and case["size1"] > 0 and case["size2"] <= len(leaves):
                assert public.consistency_proof(leaves, case["size1"], case["size2"]) == proof, path
                built += 1
        if case["wantErr"]:
            with pytest.raises(TamperDetected):
                check()
        else:
            check()
    assert built >= 10


def test_the_report_does_not_call_a_lease_renewal_a_call_without_outcome(tmp_path: Path) -> None:
    """A GPU lease renewal is decided (an ``allow``) but has no outcome of its own: the lease's
    outcomes refer to its first decision. The report must not list it as a lost call."""
    from test_broker_gated import Setup

    from agentgate.dispatch.broker import GangRequest

    setup = Setup(tmp_path)
    try:
        setup.gated.submit(setup.ids["trainer"], GangRequest("ft-1", "x", 8, gpu_type="H100"))
        setup.clock.now += 30
        setup.gated.renew(setup.ids["trainer"], "ft-1")
        setup.gated.release(setup.ids["trainer"], "ft-1")
        setup.gate.flush()
        entries = [e for e in setup.gate.audit.entries() if e.resource == "gpu:h100"]
        assert [(e.kind, e.status) for e in entries] == [
            ("allow", None),
            ("outcome", "lease_granted"),
            ("allow", None),
            ("outcome", "lease_released"),
        ]
        assert {e.ref for e in entries if e.kind == "outcome"} == {entries[0].index}
        page = render_report(setup.gate.audit.entries(), None, ())
    finally:
        setup.gate.close()
    assert "Every allowed call has its outcome." in page
