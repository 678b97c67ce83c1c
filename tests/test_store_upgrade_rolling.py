"""A live store of the previous release (commit 5d3c2e9) opened by this one.

The earlier version's own code writes the store, as in ``tests/test_store_upgrade_release.py``:
``git archive 5d3c2e9 agentgate`` unpacked into a temporary directory and run in a subprocess
(``PYTHONPATH``; this venv's interpreter); in a shallow clone without the commit the tests are
skipped. On PostgreSQL the processes run as the least-privilege application role of
docs/operations.md ("PostgreSQL set-up"), the tables made by the earlier ``agentgate store init``
as the owner. Since 5d3c2e9 this version added the table ``approval_calls`` (superseding the
requests of an edited call, ``Gate.authorize(asked_in=...)``), the SQLite file mode 0600 of a new
store and the stricter SQLite schema check, ``reconcile`` charging a granted lost lease, and
``AuditLog.referring``.

What holds (SQLite and PostgreSQL):

- The earlier day (a grant, two broker leases journaled, a lease granted and a request queued by
  a broker whose journal was lost, two approval requests pending, a checkpoint) opens with this
  version after docs/operations.md's "Upgrading" steps: ``store init`` as the owner (exit 0, no
  "not agentgate's" refusal: the SQLite schema check accepts every table 5d3c2e9 made), grants
  again. Before ``store init`` the PostgreSQL application role fails closed: a Gate raises one
  ``StoreError`` naming ``approval_calls`` and ``agentgate store init``; ``agentgate approval
  list`` exits 2 with that one line, no traceback.
- SQLite: the old file, its directory and the ``-wal`` file this version opens beside it keep the
  mode the earlier version (the umask) gave them; nothing is switched to 0600/0700 (as the docs
  say: "A store that exists keeps the mode its operator gave it").
- Both requests left pending are listed; one is signed and used once (a second use refused); the
  other, asked again by this version, is the same request; a call edited after the upgrade
  supersedes only the request this version made for it, never an earlier request (no
  ``approval_calls`` row).
- ``audit verify --checkpoint`` with the earlier checkpoint exits 0 before and after this version
  appends; a new checkpoint extends the earlier one; ``audit explain`` of an earlier entry works.
- ``reconcile`` after the restart: the lease the earlier broker granted and lost is ``lease_lost``
  and charged its whole reservation, the request lost while queued is returned (0), the journaled
  leases are left alone, and a later release is charged once; the ledger equals the outcomes.
- Rolling upgrade (an earlier process still running beside this version's, after ``store init``):
  nothing fails open. An approval of a request both ask for is used once across the two versions;
  an approval of a request this version superseded is refused by the earlier code too (the state
  is ``denied``); the earlier ``audit verify`` and ``explain`` read this version's log, superseding
  ``deny`` entries included. What breaks, failing closed: the earlier code's ``store prune``
  (``ApprovalStore.prune``) cannot delete an expired request this version asked (it leaves its
  ``approval_calls`` row, the foreign key refuses), so it raises ``StoreError`` and deletes
  nothing; this version's prune then removes them. docs/operations.md now says so.

Fixed by the lead (was a strict xfail):

- ``agentgate/gate/`` (``_record_approval_request``): a request the earlier version asked
  (no ``approval_calls`` row) that this version asks again for the same call under ``asked_in``
  is reused as is, without the call key, so when the call is then edited and asked again the
  earlier request is not superseded: it stays pending, listed to approvers, until it expires (the
  R40 defect, for runs that straddle the upgrade or a rolling upgrade). Nothing fails open (the
  approval, if given, is for the call it names). Proposed fix: when ``known`` is found and
  ``call_key`` is given, record it for the request if it has none (``INSERT INTO approval_calls
  ... ON CONFLICT (approval_id) DO NOTHING``) in the same transaction, so that a later version of
  the call closes it. Done as proposed (``ApprovalStore.keep_call``).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_store_upgrade_release as r41

from agentgate.authority import parse_chain
from agentgate.capabilities import Call
from agentgate.cli.main import main
from agentgate.dispatch.broker import Broker, GatedBroker, TenantQuota, synthetic_topology
from agentgate.errors import StoreError
from agentgate.gate import AgentIdentity, Approval, Authorization, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import open_store
from agentgate.store.broker_leases import BrokerLeaseStore

ROOT = Path(__file__).resolve().parents[1]
OLD_COMMIT = "5d3c2e9"

POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
tenants:
  team-a: {{}}
principals:
  trainer: {{kind: service, did: "{trainer}", tenant: team-a, roles: [trainer]}}
  boss: {{kind: human, did: "{boss}", tenant: team-a, roles: [owner]}}
gpus:
  h100: {{cost_per_gpu_hour: 3600}}
tools:
  deploy:
    args: {{target: {{type: string, required: true}}}}
    loggable: [target]
    idempotent: true
roles:
  trainer:
    kind: service
    capabilities:
      - resource: gpu:h100
        constraints: {{count: {{ge: 1, le: 8}}}}
      - resource: tool:deploy
    budget: {{limit: 10000000, unit: usd_micros}}
    ttl_s: 7200
  owner:
    kind: human
    capabilities: [{{resource: tool:deploy}}]
    ttl_s: 7200
approvals:
  deploy: {{resource: tool:deploy, approvers: [boss], expiry_s: 600}}
"""
"""1 micro-dollar per GPU-second; every ``deploy`` needs the boss's approval (idempotent: a second
use of an approval is refused for the approval, not by the run-once record)."""

DRIVER = r"""
import json, sys
from agentgate.authority import parse_chain
from agentgate.capabilities import Call
from agentgate.dispatch.broker import Broker, GangRequest, GatedBroker, TenantQuota, synthetic_topology
from agentgate.gate import AgentIdentity, Approval, Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import open_store
from agentgate.store.approvals import ApprovalStore
from agentgate.store.broker_leases import BrokerLeaseStore

conf = json.loads(sys.argv[1])
keys = {n: SigningKey(bytes.fromhex(s)) for n, s in conf["seeds"].items()}
store = open_store(conf["url"])
gate = Gate(parse_policy(conf["policy"], source="gpu.yaml"), store, log_key=keys["log"])
journal = BrokerLeaseStore(store) if conf["journal"] else None
broker = Broker(synthetic_topology(nodes=1, gpus_per_node=8), [TenantQuota("team-a", 8)], ttl_s=600,
                journal=journal)
saved = None if journal is None else journal.load()
if saved is not None:
    broker.restore(saved)
gated = GatedBroker(gate, broker)
if conf.get("token"):
    trainer = AgentIdentity("trainer", keys["trainer"], parse_chain(conf["token"]), "team-a")
else:
    trainer = gate.issue(keys["root"], name="trainer", key=keys["trainer"], role="trainer")

def reply(obj):
    print(json.dumps(obj), flush=True)

reply({"ready": True, "token": trainer.chain.token})
for line in sys.stdin:
    cmd = json.loads(line)
    try:
        if cmd["op"] == "submit":
            answer = gated.submit(trainer, GangRequest(cmd["id"], "ignored", cmd["gpus"], gpu_type="H100",
                                                       ttl_s=600))
            own = answer.lease()
            reply({"allowed": answer.allowed, "gpus": None if own is None else list(own.gpus)})
        elif cmd["op"] == "ask":
            approval = None if cmd.get("approval") is None else Approval.parse(cmd["approval"])
            auth = gate.authorize(trainer, Call.tool("deploy", {"target": cmd["target"]}),
                                  call_id=cmd["call"], run_id=cmd["run"], approval=approval)
            reply({"allowed": auth.allowed, "needs_approval": auth.needs_approval,
                   "payload": auth.approval_payload() if auth.needs_approval else None,
                   "index": auth.audit_index, "explain": auth.explain()})
        elif cmd["op"] == "state":
            reply({"leases": {l.id: list(l.gpus) for l in broker.leases()},
                   "queue": [q.request.id for q in broker.queue()]})
        elif cmd["op"] == "prune_approvals":
            reply({"pruned": ApprovalStore(store).prune(cmd["before"])})
        elif cmd["op"] == "checkpoint":
            gate.flush()
            reply({"note": gate.audit.checkpoint()})
        elif cmd["op"] == "exit":
            gate.close()
            reply({"ok": True})
            break
    except Exception as exc:
        reply({"error": type(exc).__name__, "message": str(exc)})
"""
"""The earlier version's process, one JSON command per line; ``journal`` false: a broker whose
journal is lost with it (its leases lost in the restart)."""

OLD_CLI = "import sys; from agentgate.cli.main import main; sys.exit(main(sys.argv[1:]))"


@pytest.fixture(scope="module")
def old_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The earlier version's ``agentgate`` package."""
    return r41.unpack(OLD_COMMIT, tmp_path_factory)


class World:
    """Keys and policy shared by the earlier and the later processes."""

    def __init__(self) -> None:
        self.keys = {n: SigningKey.generate() for n in ("root", "trainer", "boss", "log")}
        self.seeds = {n: k.seed.hex() for n, k in self.keys.items()}
        self.policy = POLICY.format(
            root=self.keys["root"].did, trainer=self.keys["trainer"].did, boss=self.keys["boss"].did
        )
        self.token: str | None = None

    def trainer(self) -> AgentIdentity:
        assert self.token is not None
        return AgentIdentity("trainer", self.keys["trainer"], parse_chain(self.token), "team-a")

    def sign(self, payload: dict[str, Any]) -> Approval:
        return Approval.sign(payload, self.keys["boss"])


class Old:
    """A running process of the earlier version on ``url``."""

    def __init__(self, old: Path, url: str, world: World, *, journal: bool = True) -> None:
        conf = {
            "url": url,
            "policy": world.policy,
            "seeds": world.seeds,
            "token": world.token,
            "journal": journal,
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-c", DRIVER, json.dumps(conf)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(old)},
            cwd=old,
        )
        world.token = self._read()["token"]

    def _read(self) -> dict[str, Any]:
        return r41.read_reply(self.proc)

    def __call__(self, op: str, **kw: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **kw}) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def ask(
        self, call: str, target: str, run: str = "run-1", approval: Approval | None = None
    ) -> dict[str, Any]:
        return self("ask", call=call, target=target, run=run, approval=approval and approval.to_dict())

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate(timeout=30)


@contextlib.contextmanager
def running(old: Path, url: str, world: World, *, journal: bool = True) -> Iterator[Old]:
    proc = Old(old, url, world, journal=journal)
    try:
        yield proc
    finally:
        proc.kill()


def _old_cli(old: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", OLD_CLI, *args],
        env={**os.environ, "PYTHONPATH": str(old)},
        cwd=old,
        capture_output=True,
        text=True,
        timeout=60,
    )


class New:
    """A process of this version: a Gate and a journaled broker restored from the store."""

    def __init__(self, url: str, world: World) -> None:
        self.world = world
        self.store = open_store(url)
        try:
            self.gate = Gate(
                parse_policy(world.policy, source="gpu.yaml"), self.store, log_key=world.keys["log"]
            )
        except BaseException:
            self.store.close()
            raise
        self.journal = BrokerLeaseStore(self.store)
        self.broker = Broker(
            synthetic_topology(nodes=1, gpus_per_node=8),
            [TenantQuota("team-a", 8)],
            ttl_s=600,
            journal=self.journal,
        )
        saved = self.journal.load()
        if saved is not None:
            self.broker.restore(saved)
        self.gated = GatedBroker(self.gate, self.broker)

    def ask(
        self, call: str, target: str, version: str, run: str = "run-1", approval: Approval | None = None
    ) -> Authorization:
        return self.gate.authorize(
            self.world.trainer(),
            Call.tool("deploy", {"target": target}),
            call_id=call,
            run_id=run,
            asked_in=(run, version),
            approval=approval,
        )

    def state(self, request_id: str) -> tuple[str, str | None]:
        ((state, approver),) = self.store.query(
            "SELECT state, approver FROM approvals WHERE id = ?", (request_id,)
        )
        return str(state), approver

    def leases(self) -> dict[str, list[str]]:
        return {lease.id: list(lease.gpus) for lease in self.broker.leases()}

    def close(self) -> None:
        self.gate.close()
        self.store.close()


@contextlib.contextmanager
def backend(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[str, str, str | None]]:
    """``(owner URL, application URL, role)``: one SQLite file (the owner is the application), or
    a fresh PostgreSQL database with a least-privilege role as docs/operations.md sets it up."""
    if kind == "sqlite":
        url = str(tmp_path / "store" / "agentgate.db")
        yield url, url, None
        return
    with r41._pg(request.getfixturevalue("postgres_server")) as (owner, app, role):
        yield owner, app, role


def _init(old: Path | None, owner: str, role: str | None) -> None:
    """``agentgate store init`` as the owner (the earlier version's when ``old``), grants again."""
    if old is None:
        assert main(["store", "init", "--store", owner]) == 0
    else:
        done = _old_cli(old, "store", "init", "--store", owner)
        assert done.returncode == 0, done.stderr
    if role is not None:
        r41._grant(owner, role)


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


_outcomes = r41._outcomes


KINDS = ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]


@pytest.mark.parametrize("kind", KINDS)
def test_a_store_of_5d3c2e9_upgrades_as_the_docs_say(
    kind: str,
    old_tree: Path,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    world = World()
    with backend(kind, request, tmp_path) as (owner, app, role):
        _init(old_tree, owner, role)
        # The earlier day: journaled leases, two requests pending, a checkpoint.
        with running(old_tree, app, world) as old:
            assert old("submit", id="ft-1", gpus=4)["gpus"] is not None
            assert old("submit", id="ft-2", gpus=2)["gpus"] is not None
            first = old.ask("c1", "prod")
            second = old.ask("c2", "staging")
            assert first["needs_approval"] and second["needs_approval"]
            journaled = old("state")
            note = old("checkpoint")["note"]
            assert old("exit") == {"ok": True}
        # A broker whose journal is lost with it: a lease granted and a request queued, then the end.
        with running(old_tree, app, world, journal=False) as lost:
            assert lost("submit", id="ft-9", gpus=4)["gpus"] is not None
            queued = lost("submit", id="ft-10", gpus=6)
            assert queued["allowed"] and queued["gpus"] is None
        first_id, second_id = first["payload"]["request"]["id"], second["payload"]["request"]["id"]
        if kind == "sqlite":
            db = Path(app)
            # The operator's modes (an auditor's group may read the store); the killed process
            # left its -wal and -shm files.
            modes = {path: 0o640 for path in (db, Path(app + "-wal"), Path(app + "-shm")) if path.exists()}
            modes[db.parent] = 0o750
            for path, mode in modes.items():
                path.chmod(mode)
        else:
            # Before step 2 the application role fails closed, naming what to do.
            with pytest.raises(StoreError, match=r"agentgate store init") as refused:
                New(app, world)
            assert "approval_calls" in str(refused.value)
            capsys.readouterr()
            assert main(["approval", "list", "--store", app]) == 2
            err = capsys.readouterr().err
            assert len(err.strip().splitlines()) == 1 and "Traceback" not in err and "store init" in err
        capsys.readouterr()
        _init(None, owner, role)  # steps 2 and 3
        assert "not agentgate's" not in capsys.readouterr().err
        # Step 4, and the earlier entries explained.
        assert main(["approval", "list", "--store", app, "--json"]) == 0
        assert {row["id"] for row in json.loads(capsys.readouterr().out)} == {first_id, second_id}
        saved = tmp_path / "checkpoint.note"
        saved.write_text(note)
        verify = [
            "audit",
            "verify",
            "--store",
            app,
            "--key",
            world.keys["log"].did,
            "--checkpoint",
            str(saved),
        ]
        assert main(verify) == 0
        capsys.readouterr()
        assert (
            main(["audit", "explain", "--store", app, "--key", world.keys["log"].did, str(first["index"])])
            == 0
        )
        assert "approval_required" in capsys.readouterr().out
        new = New(app, world)
        try:
            if kind == "sqlite":
                wal = Path(app + "-wal")
                assert wal.exists() and _mode(wal) == 0o640
                assert {path: _mode(path) for path in modes} == modes  # not switched to 0600/0700
            assert new.leases() == journaled["leases"]
            # The lease the earlier broker granted and lost is charged whole; the queued one returned.
            reserved = sum(amount for _r, _u, amount in new.gated.decisions.get("ft-9").reservations)
            assert reserved > 0
            assert sorted(new.gated.reconcile()) == ["ft-10", "ft-9"]
            ((lost_9,), (lost_10,)) = _outcomes(new.gate, "ft-9")[1:], _outcomes(new.gate, "ft-10")
            assert (lost_9.status, lost_9.budget_delta) == ("lease_lost", reserved)
            assert (lost_10.status, lost_10.budget_delta) == ("lease_lost", 0)
            assert new.leases() == journaled["leases"]
            trainer = world.trainer()
            new.gated.release(trainer, "ft-1")
            assert [o.status for o in _outcomes(new.gate, "ft-1")] == ["lease_granted", "lease_released"]
            assert new.gated.reconcile() == []
            # The second request, asked again by this version, is the same request; an edit made
            # after the upgrade supersedes only what this version asked.
            again = new.ask("c2", "staging", "v1")
            assert again.request is not None and again.request["id"] == second_id
            mine = new.ask("c3", "canary", "v1")
            assert mine.request is not None
            edited = new.ask("c3", "canary-2", "v2")
            assert edited.request is not None and edited.request["id"] != mine.request["id"]
            assert new.state(mine.request["id"]) == ("denied", "agentgate:superseded")
            assert new.state(first_id)[0] == new.state(second_id)[0] == "pending"
            # The first request, signed, is used once.
            approval = world.sign(first["payload"])
            assert new.ask("c1", "prod", "v1", approval=approval).allowed
            twice = new.ask("c1", "prod", "v1", approval=approval)
            assert not twice.allowed and "already used" in twice.explain()
            new.gate.flush()
            spent = new.gate.ledger.spent(trainer.grant_id)
            assert spent == sum(e.budget_delta for e in new.gate.audit.entries() if e.kind == "outcome")
            assert new.gate.verify().ok
            new.gate.audit.checkpoint(note)  # extends the earlier checkpoint
        finally:
            new.close()
        assert main(verify) == 0
        if kind == "sqlite":
            assert {path: _mode(path) for path in modes if path.exists()} == {
                path: mode for path, mode in modes.items() if path.exists()
            }


@pytest.mark.parametrize("kind", KINDS)
def test_rolling_upgrade_an_earlier_process_beside_this_one_fails_nothing_open(
    kind: str, old_tree: Path, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    world = World()
    with backend(kind, request, tmp_path) as (owner, app, role):
        _init(old_tree, owner, role)
        with running(old_tree, app, world) as old:
            assert old.ask("c0", "warm-up")["needs_approval"]  # the earlier process is live
            _init(None, owner, role)
            new = New(app, world)
            try:
                # One request both versions ask for: its approval is used once across them.
                asked = new.ask("c5", "prod", "v1")
                assert asked.request is not None
                theirs = old.ask("c5", "prod")
                assert theirs["payload"]["request"]["id"] == asked.request["id"]
                approval = world.sign(theirs["payload"])
                assert old.ask("c5", "prod", approval=approval)["allowed"]
                assert not new.ask("c5", "prod", "v1", approval=approval).allowed
                assert not old.ask("c5", "prod", approval=approval)["allowed"]
                # A request this version superseded: its approval is refused by the earlier code too.
                stale = new.ask("c6", "prod", "v1")
                assert stale.request is not None
                stale_approval = world.sign(stale.approval_payload())
                assert new.ask("c6", "prod-2", "v2").needs_approval
                assert new.state(stale.request["id"]) == ("denied", "agentgate:superseded")
                used = old.ask("c6", "prod", approval=stale_approval)
                assert not used["allowed"] and "error" not in used, used
                assert not new.ask("c6", "prod", "v1", approval=stale_approval).allowed
                new.gate.flush()
                assert new.gate.verify().ok
                # The earlier code reads this version's log, superseding deny entries included.
                deny = [e for e in new.gate.audit.entries() if e.kind == "deny" and e.ref is not None][-1]
                done = _old_cli(old_tree, "audit", "verify", "--store", app, "--key", world.keys["log"].did)
                assert done.returncode == 0, done.stderr
                done = _old_cli(
                    old_tree,
                    "audit",
                    "explain",
                    "--store",
                    app,
                    "--key",
                    world.keys["log"].did,
                    str(deny.index),
                )
                assert done.returncode == 0 and "superseded" in done.stdout, done.stderr
                # The earlier prune (``store prune``) cannot delete a request this version asked:
                # the foreign key of its approval_calls row refuses; it fails closed, deleting nothing.
                count = new.store.query("SELECT COUNT(*) FROM approvals")[0][0]
                pruned = old("prune_approvals", before=time.time() + 10**6)
                assert pruned.get("error") == "StoreError", pruned
                assert new.store.query("SELECT COUNT(*) FROM approvals")[0][0] == count
                assert new.gate.approvals.prune(time.time() + 10**6) == count
            finally:
                new.close()


def test_an_earlier_request_asked_again_by_this_version_is_superseded_when_its_call_is_edited(
    old_tree: Path, tmp_path: Path
) -> None:
    world = World()
    url = str(tmp_path / "agentgate.db")
    _init(old_tree, url, None)
    with running(old_tree, url, world) as old:
        before = old.ask("c8", "prod")
        assert old("exit") == {"ok": True}
    _init(None, url, None)
    new = New(url, world)
    try:
        earlier = before["payload"]["request"]["id"]
        again = new.ask("c8", "prod", "v1")  # the run resumed after the upgrade asks again
        assert again.request is not None and again.request["id"] == earlier
        assert new.ask("c8", "prod-2", "v2").needs_approval  # then its answer is edited
        assert new.state(earlier) == ("denied", "agentgate:superseded")
    finally:
        new.close()
