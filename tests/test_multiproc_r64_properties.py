"""Several worker processes on one store (review R64), each property across four processes
released together, on one SQLite file and on one PostgreSQL database: a signed invocation
presented by all of them is allowed once (also when the one allowed is SIGKILLed and the others
retry); a budget spent from all of them is never overspent and a reservation left by a killed
worker stays held until ``agentgate budget settle``; a quota holds across them; once a
revocation has committed in one process no decision that starts later allows a call below it;
one approval is used once; and the log that all of them (one killed inside its transaction)
wrote verifies with its indexes gap-free.

Replay, budgets, revocation and the log run on both stores; the others (a quota, approvals, a
call that runs once, sub-agents' budgets, settling by hand, revocation through the gateway) on
SQLite alone (``ON_SQLITE``): on PostgreSQL they pass too (run at review R64), and `make test`
is already over the 15 minutes it aims for on two cores (tests/README.md).

Each worker is forked from a fork server that has imported agentgate and opened nothing
(``_forked.Worker``; a fresh interpreter each until review R80): it inherits no lock, no SQLite
connection and no pool. It opens the store itself, says it is ready, waits for a start file, acts,
and writes one JSON line.
"""

from __future__ import annotations

import contextlib
import io
import json
import signal
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from _forked import Worker

from agentgate.authority import Invocation, parse_chain
from agentgate.capabilities import Call
from agentgate.cli.main import main
from agentgate.dispatch.gateway._client import chat_call
from agentgate.gate import Approval, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import open_store

WORKERS = 4
BUDGET = 600
"""The role ``chatter``'s budget in usd_micros; a model call reserves ``RESERVED`` of it."""
RESERVED = 100
"""What ``TOKENS`` reserve at one usd_micro per token."""
TOKENS = (10, 90)
SPENT = (10, 40)
"""The usage a worker reports for a call that ran: it is charged 50 of its 100."""
QUOTA = 5
MODEL = "m1"
BODY = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 90}

POLICY = """
version: 1
trust_anchors: {{root: {{did: "{root}"}}}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [chatter, tooler]}}
  alice: {{kind: human, did: "{alice}"}}
  bob: {{kind: human, did: "{bob}"}}
  carol: {{kind: human, did: "{carol}"}}
  dave: {{kind: human, did: "{dave}"}}
models:
  {model}: {{cost_per_mtok: {{input: 1000000, output: 1000000}}}}
tools:
  lookup:
    args: {{id: {{type: string, required: true}}}}
    idempotent: true
  ping:
    args: {{n: {{type: integer, required: true}}}}
    idempotent: true
  count:
    args: {{n: {{type: integer, required: true}}}}
    idempotent: true
  pay:
    args: {{amount: {{type: integer, required: true}}}}
  wire:
    args: {{amount: {{type: integer, required: true}}}}
    idempotent: true
roles:
  chatter:
    kind: agent
    capabilities: [{{resource: "model:{model}"}}]
    budget: {{limit: {budget}, unit: usd_micros}}
    ttl_s: 600
    delegation:
      max_depth: 1
      max_ttl_s: 600
      budget: {{limit: {budget}, unit: usd_micros}}
      capabilities: [{{resource: "model:{model}"}}]
  tooler:
    kind: agent
    capabilities: [{{resource: tool:lookup}}, {{resource: tool:ping}}, {{resource: tool:count}}, {{resource: tool:pay}}, {{resource: tool:wire}}]
    budget: {{limit: 100000, unit: calls}}
    ttl_s: 600
    delegation:
      max_depth: 1
      max_ttl_s: 600
      capabilities: [{{resource: tool:count}}]
approvals:
  lookup:
    resource: tool:lookup
    approvers: [alice]
    expiry_s: 600
  wire:
    resource: tool:wire
    approvers: [alice, bob, carol, dave]
    quorum: 3
    expiry_s: 600
quotas:
  pings:
    principal: agent
    window_s: 315360000
    limit: {quota}
    resources: [tool:ping]
"""

WORKER = r"""
import json, os, signal, sys, time
from pathlib import Path

work, url, go, me = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
extra = json.loads(sys.argv[5])
mode = extra["mode"]

from agentgate.authority import parse_chain
from agentgate.capabilities import Call
from agentgate.gate import AgentIdentity, Approval, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import open_store

policy = parse_policy((work / "policy.yaml").read_text(), source="r64.yaml")

def identity(name, seed):
    key = SigningKey(bytes.fromhex((work / f"{seed}.seed").read_text()))
    return AgentIdentity(name, key, parse_chain((work / f"{name}.chain").read_text()))

def note(label):
    # O_APPEND: each line is one write, whole, whatever the other processes write at once.
    fd = os.open(work / "ran", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, (label + "\n").encode())
    os.close(fd)
    return "done"

def wait_for_go():
    (work / f"ready-{go.name}-{me}").touch()
    deadline = time.monotonic() + 60
    while not go.exists():
        if time.monotonic() > deadline:
            raise SystemExit("no start signal")
        time.sleep(0.002)

def first_to_claim():
    # One worker in all is killed: the first allowed (O_EXCL: one process creates the file).
    try:
        os.close(os.open(work / "kill-claimed", os.O_WRONLY | os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return False
    return True

def decisions_until_seen_revoked(decide):
    # Decides (``decide(i)``: allowed, why, audit index) until three decisions have begun after
    # the revoker's "revoked" file appeared, which it writes once the revoke has returned: each
    # of those began after ``revoked_at``, however late the revoker ran or the workers ran out.
    decisions, after, i = [], 0, 0
    deadline = time.monotonic() + 120
    while after < 3:
        if time.monotonic() > deadline:
            raise SystemExit(f"the revoke never returned: {len(decisions)} decisions, none after it")
        seen = (work / "revoked").exists()  # read before ``began``: this decision began after
        began = time.monotonic()
        decisions.append([began, *decide(i)])
        after, i = after + seen, i + 1
    return decisions

def killed_after(index):
    # The decision has committed (its allow, reservation, nonce or approval); the call never runs.
    (work / f"killed-{me}").write_text(str(index))
    os.kill(os.getpid(), signal.SIGKILL)

out = {}
if mode == "replay":
    from agentgate.dispatch.gateway import GatewayGate
    from agentgate.dispatch.gateway._client import chat_call
    gate = GatewayGate(policy, open_store(url))
    token, signed = (work / "chatter.chain").read_text(), (work / "invocation").read_text()
    call = chat_call(json.loads((work / "body.json").read_text()))
    wait_for_go()
    codes = []
    for attempt in range(2):  # refused: the caller retries the same request once
        answer = gate.authorize_invocation(token, signed, call, tuple(extra["tokens"]))
        if answer.allowed:
            killed_after(answer.auth.audit_index)
        codes.append([answer.status, answer.code, answer.message])
    out = {"codes": codes}
elif mode == "cli":  # an operator's command, run when the others run theirs
    from agentgate.cli.main import main
    wait_for_go()
    out = {"rc": main(extra["argv"])}
    gate = None
else:
    gate = Gate(policy, open_store(url))

if mode == "spend":
    agent = identity(*extra.get("who", ["chatter", "agent"]))
    wait_for_go()
    allowed, refused = 0, []
    for i in range(extra["n"]):
        call = Call.model(extra["model"], {"max_tokens": 90})
        auth = gate.authorize(agent, call, tokens=tuple(extra["tokens"]), call_id=f"s{me}-{i}")
        if not auth.allowed:
            refused.append(auth.explain())
            continue
        if extra.get("kill") and first_to_claim():
            killed_after(auth.audit_index)
        gate.run(auth, lambda: note(f"{me}-{i}"), spent=lambda _: tuple(extra["spent"]))
        allowed += 1
    out = {"allowed": allowed, "refused": refused}
elif mode == "ping":
    agent = identity("tooler", "agent")
    wait_for_go()
    allowed, refused = 0, []
    for i in range(extra["n"]):
        auth = gate.authorize(agent, Call.tool("ping", {"n": i}), call_id=f"p{me}-{i}")
        if not auth.allowed:
            refused.append(auth.explain())
            continue
        if extra.get("kill") and first_to_claim():
            killed_after(auth.audit_index)
        gate.run(auth, lambda: note(f"{me}-{i}"))
        allowed += 1
    out = {"allowed": allowed, "refused": refused}
elif mode == "count":  # a sub-agent deciding until it has decided after the revoke returned
    sub = identity("sub", "sub")
    wait_for_go()
    def decide_count(i):
        auth = gate.authorize(sub, Call.tool("count", {"n": i}), call_id=f"c{me}-{i}")
        if auth.allowed:
            gate.run(auth, lambda: note(f"{me}-{i}"))
        return [auth.allowed, auth.explain(), auth.audit_index]
    out = {"decisions": decisions_until_seen_revoked(decide_count)}
elif mode == "revoker":
    root = parse_chain((work / "tooler.chain").read_text()).tip.id
    if extra.get("argv"):  # imported before the start: the revoke follows the runs it waits for
        from agentgate.cli.main import main
    wait_for_go()
    deadline = time.monotonic() + 30
    while len((work / "ran").read_text().splitlines() if (work / "ran").exists() else []) < extra["after"]:
        if time.monotonic() > deadline:
            raise SystemExit("the workers never ran")
        time.sleep(0.002)
    if extra.get("argv"):  # agentgate grant revoke, as an operator runs it
        assert main(extra["argv"]) == 0
    else:
        gate.revoke(root, by="ops", reason="r64")
    out = {"revoked_at": time.monotonic()}  # after the commit: every later decision must see it
    (work / "revoked").touch()  # after revoked_at: the deciding workers stop soon after they see it
elif mode == "gateway":  # a sub-agent calling through the gateway, each call signed afresh
    from agentgate.dispatch.gateway import GatewayGate
    from agentgate.dispatch.gateway._client import chat_call, invocation_headers
    gate.close()
    gate = GatewayGate(policy, open_store(url))
    kid = identity(extra["who"], extra["who"])
    body = {"model": extra["model"], "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    wait_for_go()
    def decide_call(i):  # a refusal for the budget, spent before the revoke, goes on too
        headers = invocation_headers(kid.key, kid.chain, body)
        answer = gate.authorize_invocation(
            kid.chain.token, headers["X-Agentgate-Invocation"], chat_call(body), (1, 1)
        )
        if answer.allowed:
            note(f"{me}-{i}")
        return [answer.allowed, f"{answer.code}: {answer.message}", answer.auth.audit_index]
    out = {"decisions": decisions_until_seen_revoked(decide_call)}
elif mode == "approved":
    agent = identity("tooler", "agent")
    approval = Approval.parse(json.loads((work / extra.get("approval", "approval.json")).read_text()))
    call = Call.tool(*extra.get("call", ["lookup", {"id": "o-1"}]))
    wait_for_go()
    answers = []
    for attempt in range(2):  # refused: the worker tries the same approved call once more
        auth = gate.authorize(agent, call, call_id="l1", run_id="thread-1", approval=approval)
        if auth.allowed:
            killed_after(auth.audit_index) if extra.get("kill") else gate.run(auth, lambda: note(f"{me}"))
            answers.append(["allowed", ""])
            break
        answers.append([str(auth.verdict), auth.explain()])
    out = {"answers": answers}
elif mode == "audit":  # decisions and outcomes; one worker dies inside a decision's transaction
    agent = identity("tooler", "agent")
    if extra.get("kill_at") is not None:
        append, appended = gate.audit.append, [0]
        def dying_append(*args, **kwargs):
            entry = append(*args, **kwargs)
            appended[0] += 1
            if appended[0] == extra["kill_at"]:
                (work / f"killed-{me}").write_text(str(entry))
                os.kill(os.getpid(), signal.SIGKILL)  # the entry written, its commit never made
            return entry
        gate.audit.append = dying_append
    wait_for_go()
    allowed = []
    for i in range(extra["n"]):
        auth = gate.authorize(agent, Call.tool("count", {"n": i}), call_id=f"a{me}-{i}")
        assert auth.allowed, auth.explain()
        gate.run(auth, lambda: "done")
        allowed.append(auth.audit_index)
        if i % 2:
            gate.audit.checkpoint()
    out = {"allowed": allowed}
elif mode == "once":  # one call of a tool that must run once, decided everywhere at once
    agent = identity("tooler", "agent")
    call = Call.tool("pay", {"amount": 40})
    wait_for_go()
    answers = []
    for attempt in range(2):  # refused: the worker decides the same call once more
        auth = gate.authorize(agent, call, call_id="p1", run_id="thread-1")
        if auth.allowed:
            if extra.get("kill"):
                killed_after(auth.audit_index)
            gate.run(auth, lambda: note(f"{me}"), call_id="p1", run_id="thread-1")
            answers.append(["allowed", ""])
            break
        answers.append([str(auth.verdict), auth.explain()])
    out = {"answers": answers}
elif mode == "late":  # a call that runs on after an operator settled its reservation by hand
    agent = identity("chatter", "agent")
    wait_for_go()
    call = Call.model(extra["model"], {"max_tokens": 90})
    auth = gate.authorize(agent, call, tokens=tuple(extra["tokens"]), call_id="slow")
    assert auth.allowed, auth.explain()
    (work / "slow-allowed.tmp").write_text(str(auth.audit_index))
    os.replace(work / "slow-allowed.tmp", work / "slow-allowed")  # whole when it appears
    def slow_call():
        deadline = time.monotonic() + 60
        while not (work / "resume").exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        return "done"
    gate.run(auth, slow_call, spent=lambda _: tuple(extra["spent"]))
    after = gate.authorize(agent, call, tokens=tuple(extra["tokens"]), call_id="after")
    if after.allowed:
        gate.run(after, lambda: "done", spent=lambda _: tuple(extra["spent"]))
    out = {"after": after.allowed, "why": after.explain()}
if gate is not None:
    gate.close()
print(json.dumps(out))
"""


class Workers:
    """One store (SQLite file or PostgreSQL database), its policy and identities, in ``work``."""

    def __init__(self, work: Path, url: str) -> None:
        self.work, self.url = work, url
        self.keys = {
            n: SigningKey.generate() for n in ("root", "agent", "alice", "bob", "carol", "dave", "sub")
        }
        dids = {n: k.did for n, k in self.keys.items() if n != "sub"}
        text = POLICY.format(model=MODEL, budget=BUDGET, quota=QUOTA, **dids)
        (work / "policy.yaml").write_text(text)
        with self.gate() as gate:
            self.chatter = gate.issue(
                self.keys["root"], name="chatter", key=self.keys["agent"], role="chatter"
            )
            self.tooler = gate.issue(self.keys["root"], name="tooler", key=self.keys["agent"], role="tooler")
            self.sub = gate.delegate(
                self.tooler,
                name="sub",
                key=self.keys["sub"],
                capabilities=["tool:count"],
                ttl=timedelta(minutes=5),
            )
        for name in ("agent", "sub"):
            (work / f"{name}.seed").write_text(self.keys[name].seed.hex())
        for name, held in (("chatter", self.chatter), ("tooler", self.tooler), ("sub", self.sub)):
            (work / f"{name}.chain").write_text(held.chain.token)

    def delegate_each(self, n: int, budget: int) -> list[str]:
        """``n`` sub-agents of the agent's ``chatter`` grant, each with ``budget``; their chain names."""
        names = []
        with self.gate() as gate:
            for i in range(n):
                key, name = SigningKey.generate(), f"kid{i}"
                kid = gate.delegate(
                    self.chatter,
                    name=name,
                    key=key,
                    capabilities=[f"model:{MODEL}"],
                    ttl=timedelta(minutes=5),
                    budget=budget,
                )
                (self.work / f"{name}.seed").write_text(key.seed.hex())
                (self.work / f"{name}.chain").write_text(kid.chain.token)
                names.append(name)
        return names

    def gate(self) -> Gate:
        return Gate(
            parse_policy((self.work / "policy.yaml").read_text(), source="r64.yaml"), open_store(self.url)
        )

    def run(self, extras: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
        """One worker per ``extras`` item, released at once: (exit status, JSON result) of each."""
        return self.finish(self.start(extras))

    def start(self, extras: list[dict[str, Any]]) -> list[Worker]:
        """One worker per ``extras`` item, released at once (``finish`` waits for them)."""
        go = self.work / f"go-{time.monotonic_ns()}"
        started = [
            Worker(self.work, WORKER, [str(self.work), self.url, str(go), str(me), json.dumps(extra)])
            for me, extra in enumerate(extras)
        ]
        deadline = time.monotonic() + 120
        while not all((self.work / f"ready-{go.name}-{me}").exists() for me in range(len(extras))):
            exited = [p.poll() for p in started]
            assert time.monotonic() < deadline and exited == [None] * len(started), [
                p.stderr()[-2000:] for p in started if p.poll() is not None
            ]
            time.sleep(0.005)
        go.touch()
        return started

    def finish(self, started: list[Worker]) -> list[tuple[int, dict[str, Any]]]:
        """Wait for the workers ``start`` started: (exit status, JSON result) of each."""
        results = []
        for process in started:
            code = process.wait()
            assert code in (0, -signal.SIGKILL), process.stderr()[-3000:]
            lines = process.stdout().strip().splitlines()
            results.append((code, json.loads(lines[-1]) if lines else {}))
        return results

    def killed(self) -> dict[int, int]:
        """Worker number: the audit index it wrote before it was killed."""
        return {int(p.name.split("-")[1]): int(p.read_text()) for p in self.work.glob("killed-*")}

    def ran(self) -> list[str]:
        path = self.work / "ran"
        return path.read_text().splitlines() if path.exists() else []

    def verified(self) -> list[Any]:
        """The log's entries, checked gap-free and verified (``Gate.verify`` and ``agentgate audit verify``)."""
        with self.gate() as gate:
            entries = list(gate.audit.entries())
            assert [e.index for e in entries] == list(range(len(entries)))
            assert gate.verify().ok
        assert main(["audit", "verify", "--store", self.url]) == 0
        return entries


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def workers(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Workers]:
    url = (
        str(tmp_path / "agentgate.db")
        if request.param == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    yield Workers(tmp_path, url)


ON_SQLITE = pytest.mark.parametrize("workers", ["sqlite"], indirect=True)
"""A property checked on the SQLite store alone (the module's docstring says why)."""


def test_one_signed_invocation_presented_by_every_process_is_allowed_once(workers: Workers) -> None:
    """Review R64: one signed invocation sent to the gateway by four processes at once is allowed
    once (its nonce); the process allowed is SIGKILLed at once, and the others, retrying the same
    invocation, are refused as a replay again; its reservation stays held and the log verifies."""
    signed = Invocation.sign(workers.keys["agent"], workers.chatter.chain, chat_call(BODY), ttl=300)
    (workers.work / "invocation").write_text(signed.encode())
    (workers.work / "body.json").write_text(json.dumps(BODY))
    results = workers.run([{"mode": "replay", "tokens": TOKENS}] * WORKERS)
    assert sorted(status for status, _ in results) == [-signal.SIGKILL] + [0] * (WORKERS - 1), results
    (allow_index,) = workers.killed().values()
    refusals = [code for status, out in results if status == 0 for code in out["codes"]]
    assert len(refusals) == 2 * (WORKERS - 1)
    assert all(status == 401 and "nonce was already used" in why for status, _, why in refusals), refusals
    entries = workers.verified()
    assert [e.index for e in entries if e.kind == "allow" and e.resource == f"model:{MODEL}"] == [allow_index]
    with workers.gate() as gate:
        assert gate.ledger.remaining(workers.chatter.chain.root.id) == BUDGET - RESERVED


def test_a_budget_spent_from_every_process_is_never_overspent_and_a_killed_hold_is_settled_once(
    workers: Workers,
) -> None:
    """Review R64: four processes spend one grant's budget at once, the first allowed SIGKILLed after its
    allow: what was charged (50 for each call that ran) and the killed call's reservation (100,
    held: docs/operations.md) together are exactly what the ledger spent, never more than the
    budget; ``agentgate budget held`` lists the killed one's reservation alone, and ``budget
    settle --not-run`` gives it back once (a second settle is refused)."""
    spend = {"mode": "spend", "model": MODEL, "tokens": TOKENS, "spent": SPENT, "n": 5}
    results = workers.run([{**spend, "kill": True}] * WORKERS)
    assert sorted(status for status, _ in results) == [-signal.SIGKILL] + [0] * (WORKERS - 1), results
    survivors = [out for status, out in results if status == 0]
    ran = sum(out["allowed"] for out in survivors)
    refused = [why for out in survivors for why in out["refused"]]
    assert ran == len(workers.ran()) and refused, results  # the budget's edge was reached
    assert all("budget" in why for why in refused), refused
    charged = ran * sum(SPENT) + RESERVED
    assert charged <= BUDGET
    root = workers.chatter.chain.root.id
    with workers.gate() as gate:
        assert gate.ledger.remaining(root) == BUDGET - charged
    entries = workers.verified()
    (killed_allow,) = workers.killed().values()
    assert entries[killed_allow].kind == "allow"
    held = _cli_json(["budget", "held", "--older-than", "0", "--json", "--store", workers.url])
    assert [(h["amount"], h["allow_index"]) for h in held] == [(RESERVED, killed_allow)], held
    settle = [
        "budget",
        "settle",
        str(held[0]["id"]),
        "--not-run",
        "--older-than",
        "0",
        "--store",
        workers.url,
    ]
    assert main(settle) == 0
    assert main(settle) != 0
    with workers.gate() as gate:
        assert gate.ledger.remaining(root) == BUDGET - charged + RESERVED
    workers.verified()


@ON_SQLITE
def test_a_quota_holds_across_processes_one_killed_after_its_allow(workers: Workers) -> None:
    """Review R64: a quota of QUOTA calls, four processes asking for three each at once, one
    SIGKILLed after its allow (the first process allowed): exactly QUOTA are allowed in all (the killed one's counts),
    each other refusal names the quota."""
    ping = {"mode": "ping", "n": 3}
    results = workers.run([{**ping, "kill": True}] * WORKERS)
    assert sorted(status for status, _ in results) == [-signal.SIGKILL] + [0] * (WORKERS - 1), results
    survivors = [out for status, out in results if status == 0]
    allowed = sum(out["allowed"] for out in survivors) + len(workers.killed())
    assert allowed == QUOTA and len(workers.ran()) == QUOTA - 1, results
    refused = [why for out in survivors for why in out["refused"]]
    assert len(refused) == 3 * (WORKERS - 1) - (QUOTA - 1)
    assert all("pings" in why for why in refused), refused
    entries = workers.verified()
    assert len([e for e in entries if e.kind == "allow" and e.resource == "tool:ping"]) == QUOTA


def test_no_decision_that_starts_after_a_revocation_committed_allows_a_call_below_it(
    workers: Workers,
) -> None:
    """Review R64: four processes decide calls of a sub-agent (a grant delegated below the
    agent's) while a fifth revokes the agent's grant: no allow started after the revocation
    returned, each process is refused as revoked from then on, and in the log no allow comes after
    the revoke entry (a decision takes the log's lock before it reads revocation). Each process
    decides until three of its decisions began after the revoke returned (review R65: a fixed
    number of calls, or three refusals, could all end before the revoker, late under load, did)."""
    results = workers.run([{"mode": "count"}] * WORKERS + [{"mode": "revoker", "after": 2 * WORKERS}])
    assert [status for status, _ in results] == [0] * (WORKERS + 1), results
    revoked_at = results[-1][1]["revoked_at"]
    decisions = [d for _, out in results[:-1] for d in out["decisions"]]
    late = [d for d in decisions if d[0] > revoked_at]
    assert len(late) >= 3 * WORKERS, (revoked_at, late)  # each worker's last three, at least
    assert not [d for d in late if d[1]], late
    last = [d for _, out in results[:-1] for d in out["decisions"][-3:]]
    assert all(not allowed and "revoked" in why for _, allowed, why, _ in last), last
    entries = workers.verified()
    (revoke,) = [e for e in entries if e.kind == "revoke"]
    assert revoke.chain_hash is not None
    counted = [e for e in entries if e.kind == "allow" and e.resource == "tool:count"]
    assert [e.index for e in counted if e.index > revoke.index] == []
    assert len(counted) == len([d for d in decisions if d[1]])


def _allowed_once(workers: Workers, results: list[tuple[int, dict[str, Any]]], kill: bool) -> list[str]:
    """What the once-only cases below assert alike of four workers each deciding one call twice:
    every worker ended (one SIGKILLed with ``kill``), one decision allowed (the killed worker's,
    with ``kill``), the call ran once (never with ``kill``); the refusals' reasons, one for every
    other decision."""
    statuses = sorted(status for status, _ in results)
    assert statuses == ([-signal.SIGKILL] if kill else []) + [0] * (WORKERS - int(kill)), results
    answers = [a for _, out in results for a in out.get("answers", [])]
    allowed = [a for a in answers if a[0] == "allowed"] + [["allowed", ""]] * len(workers.killed())
    assert len(allowed) == 1, answers
    assert len(workers.ran()) == (0 if kill else 1)
    refused = [why for verdict, why in answers if verdict != "allowed"]
    assert len(refused) == 2 * (WORKERS - 1), answers
    return refused


@ON_SQLITE
@pytest.mark.parametrize("kill", [False, True])
def test_one_approval_presented_by_every_process_is_used_once(workers: Workers, kill: bool) -> None:
    """Review R64: one approval of an idempotent call (only its single use stops a second run),
    presented by four processes at once, each trying again once when refused: one is allowed,
    once; also when the process allowed is SIGKILLed before the call runs (the approval stays
    used: the others are still refused)."""
    call = Call.tool("lookup", {"id": "o-1"})
    with workers.gate() as gate:
        asked = gate.authorize(workers.tooler, call, call_id="l1", run_id="thread-1")
        assert asked.needs_approval
        approval = Approval.sign(dict(asked.request or {}), workers.keys["alice"])
    (workers.work / "approval.json").write_text(json.dumps(approval.to_dict()))
    results = workers.run([{"mode": "approved", "kill": kill}] * WORKERS)
    refused = _allowed_once(workers, results, kill)
    assert all("used" in why or "runs once" in why for why in refused), refused
    entries = workers.verified()
    assert len([e for e in entries if e.kind == "allow" and e.resource == "tool:lookup"]) == 1


def test_a_log_written_by_every_process_one_killed_inside_its_transaction_verifies(
    workers: Workers,
) -> None:
    """Review R64: four processes decide and record outcomes (and checkpoint) at once; one is
    SIGKILLed after its third entry was written and before its transaction committed: the
    entry is gone, the indexes are gap-free with no duplicate, every survivor's allow is there
    once, and the log verifies (``Gate.verify`` and ``agentgate audit verify``)."""
    audit = {"mode": "audit", "n": 4}
    results = workers.run([{**audit, "kill_at": 3}] + [audit] * (WORKERS - 1))
    assert [status for status, _ in results] == [-signal.SIGKILL] + [0] * (WORKERS - 1), results
    entries = workers.verified()
    allows = {e.index for e in entries if e.kind == "allow" and e.resource == "tool:count"}
    survivors = [i for _, out in results[1:] for i in out["allowed"]]
    assert len(survivors) == len(set(survivors)) == 4 * (WORKERS - 1)
    assert set(survivors) <= allows
    # The killed worker's first allow committed; its third entry (its second allow, written
    # after the first call's outcome) was rolled back with its process.
    assert len(allows) == len(survivors) + 1
    with workers.gate() as gate:
        gate.audit.checkpoint()
        assert gate.verify().ok


def _cli_json(argv: list[str]) -> Any:
    """What ``agentgate ARGV`` printed as JSON (it must exit 0)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    return json.loads(out.getvalue())


@ON_SQLITE
def test_a_held_reservation_settled_by_four_operators_at_once_and_by_its_own_late_process_is_settled_once(
    workers: Workers,
) -> None:
    """Review R64: a call still running (its process slow, not dead) while four operators run
    ``agentgate budget settle --not-run`` on its reservation at once: one settles it, three are
    refused (exit 1); the process then ends its call, and its outcome is recorded without
    settling the reservation again (docs/cli.md; until review R67 not recorded): the reservation
    is released once, then charged once by that outcome, since the call ran (review R68: until
    then never charged), the process goes on deciding, and the log verifies with two outcomes
    for the call, the operator's, then its process's."""
    late = workers.start([{"mode": "late", "model": MODEL, "tokens": TOKENS, "spent": SPENT}])
    allowed = workers.work / "slow-allowed"
    deadline = time.monotonic() + 60
    while not allowed.exists():
        assert time.monotonic() < deadline and late[0].poll() is None, late[0].stderr()
        time.sleep(0.005)
    allow_index = int(allowed.read_text())
    (held,) = _cli_json(["budget", "held", "--older-than", "0", "--json", "--store", workers.url])
    assert held["allow_index"] == allow_index
    settle = ["budget", "settle", held["id"], "--not-run", "--older-than", "0", "--store", workers.url]
    results = workers.run([{"mode": "cli", "argv": settle}] * WORKERS)
    assert sorted(out["rc"] for _, out in results) == [0] + [1] * (WORKERS - 1), results
    (workers.work / "resume").touch()
    ((status, out),) = workers.finish(late)
    assert status == 0 and out["after"], out
    root = workers.chatter.chain.root.id
    with workers.gate() as gate:
        assert gate.ledger.remaining(root) == BUDGET - 2 * sum(SPENT)  # the late call's, the second's
    entries = workers.verified()
    assert [e.status for e in entries if e.kind == "outcome" and e.ref == allow_index] == ["not_run", "ok"]


@ON_SQLITE
def test_sub_agents_spending_in_every_process_never_overspend_their_own_or_their_parents_budget(
    workers: Workers,
) -> None:
    """Review R64: four sub-agents of one grant, each with half its budget, spend at once, one
    per process: a spend counts against the sub-agent's budget and its parent's (docs/concepts.md,
    reserved root to tip), so the parent's is never overspent though the halves add up to twice
    it, and no sub-agent spends more than its own; the ledger holds exactly what was charged."""
    kids = workers.delegate_each(WORKERS, BUDGET // 2)
    spend = {"mode": "spend", "model": MODEL, "tokens": TOKENS, "spent": SPENT, "n": 5}
    results = workers.run([{**spend, "who": [kid, kid]} for kid in kids])
    assert [status for status, _ in results] == [0] * WORKERS, results
    ran = [out["allowed"] for _, out in results]
    refused = [why for _, out in results for why in out["refused"]]
    assert refused and all("budget" in why for why in refused), refused
    assert sum(ran) * sum(SPENT) <= BUDGET and sum(ran) == len(workers.ran()), ran
    with workers.gate() as gate:
        assert gate.ledger.remaining(workers.chatter.chain.root.id) == BUDGET - sum(ran) * sum(SPENT)
        for kid, calls in zip(kids, ran, strict=True):
            tip = parse_chain((workers.work / f"{kid}.chain").read_text()).tip.id
            assert calls * sum(SPENT) <= BUDGET // 2
            left = gate.ledger.remaining(tip)  # None: never reserved on (its parent's was spent)
            assert left == BUDGET // 2 - calls * sum(SPENT) or (left is None and calls == 0)
    workers.verified()


@ON_SQLITE
@pytest.mark.parametrize("kill", [False, True])
def test_a_call_that_must_run_once_decided_in_every_process_at_once_runs_once(
    workers: Workers, kill: bool
) -> None:
    """Review R64: the same call (run, call id, arguments) of a tool the policy does not mark
    idempotent, decided by four processes at once, each deciding it again once when refused:
    one is allowed, once; also when the process allowed is SIGKILLed before the call runs (the
    call is then refused as maybe still running, and ``agentgate tasks unsettled`` lists it)."""
    results = workers.run([{"mode": "once", "kill": kill}] * WORKERS)
    refused = _allowed_once(workers, results, kill)
    assert all("once" in why for why in refused), refused
    entries = workers.verified()
    assert len([e for e in entries if e.kind == "allow" and e.resource == "tool:pay"]) == 1
    if kill:
        unsettled = _cli_json(["tasks", "unsettled", "--json", "--store", workers.url])
        assert [u["allow_index"] for u in unsettled] == list(workers.killed().values()), unsettled


@ON_SQLITE
def test_four_approvers_voting_in_four_processes_at_once_complete_a_quorum_of_three_once(
    workers: Workers,
) -> None:
    """Review R64: a quorum of three of four approvers, each approver's yes presented by its own
    process at once (each trying again once when refused): the call is allowed once, it runs
    once, and the request is not left open with its votes in."""
    call = Call.tool("wire", {"amount": 7})
    with workers.gate() as gate:
        asked = gate.authorize(workers.tooler, call, call_id="l1", run_id="thread-1")
        assert asked.needs_approval
        payload = dict(asked.request or {})
    extras = []
    for who in ("alice", "bob", "carol", "dave"):
        (workers.work / f"{who}.json").write_text(
            json.dumps(Approval.sign(payload, workers.keys[who]).to_dict())
        )
        extras.append({"mode": "approved", "approval": f"{who}.json", "call": ["wire", {"amount": 7}]})
    results = workers.run(extras)
    assert [status for status, _ in results] == [0] * WORKERS, results
    answers = [a for _, out in results for a in out["answers"]]
    assert len([a for a in answers if a[0] == "allowed"]) == 1, answers
    assert len(workers.ran()) == 1
    with workers.gate() as gate:
        assert gate.approvals.open_records() == []
    entries = workers.verified()
    assert len([e for e in entries if e.kind == "allow" and e.resource == "tool:wire"]) == 1


@ON_SQLITE
def test_no_gateway_call_that_starts_after_grant_revoke_holder_committed_is_allowed(workers: Workers) -> None:
    """Review R64: four gateway processes take signed calls of a sub-agent (below the agent's
    grant) while a fifth runs ``agentgate grant revoke --holder`` for the agent's key (a leaked
    key, docs/operations.md): no call started after the command returned is allowed, each
    process is answered 401 revoked from then on, and in the log no allow of the sub-agent's model
    calls comes after the revoke entries. Each process calls until three of its calls began after
    the command returned (review R65: 2,000 calls, or three refusals, could all end before the
    revoker, late under load, did)."""
    (kid,) = workers.delegate_each(1, BUDGET)
    call = {"mode": "gateway", "who": kid, "model": MODEL}
    argv = ["grant", "revoke", "--holder", workers.keys["agent"].did, "--by", "ops", "--store", workers.url]
    results = workers.run([call] * WORKERS + [{"mode": "revoker", "after": 2 * WORKERS, "argv": argv}])
    assert [status for status, _ in results] == [0] * (WORKERS + 1), results
    revoked_at = results[-1][1]["revoked_at"]
    decisions = [d for _, out in results[:-1] for d in out["decisions"]]
    late = [d for d in decisions if d[0] > revoked_at]
    assert len(late) >= 3 * WORKERS, (revoked_at, late)  # each worker's last three, at least
    assert not [d for d in late if d[1]], late
    last = [d for _, out in results[:-1] for d in out["decisions"][-3:]]
    assert all(not allowed and why.startswith("revoked:") for _, allowed, why, _ in last), last
    entries = workers.verified()
    first_revoke = min(e.index for e in entries if e.kind == "revoke")
    called = [e for e in entries if e.kind == "allow" and e.resource == f"model:{MODEL}"]
    assert [e.index for e in called if e.index > first_revoke] == []
    assert len(called) == len([d for d in decisions if d[1]])
