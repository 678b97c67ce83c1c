"""The command line against a PostgreSQL store: the whole lifecycle an operator runs
with ``AGENTGATE_STORE=postgresql://...``, as real ``python -m agentgate`` processes, on the
session's PostgreSQL 15 server (docs/cli.md and docs/operations.md are the contract).

What holds (checked here):

- The walk ``store init`` / ``audit checkpoint`` as the owner, then, as the least-privilege
  application role that docs/operations.md sets up (its SQL block run as printed): ``grant issue``
  (with ``--allow`` and with ``--policy --role``), ``grant delegate`` (and exit 1 for a widening,
  no token written), ``grant inspect`` (tree and ``--json``), ``grant check`` (0 allow, 1 deny),
  ``grant revoke`` by file and by id and ``check`` after it, a Gate's approval request listed by
  ``approval list --json`` and signed by ``approval sign``, a dead letter and a failed once-only
  call seen by ``tasks dead-letters`` / ``tasks unsettled`` and settled by ``tasks settle``,
  ``audit checkpoint --out`` / ``verify --checkpoint`` / ``show --json`` / ``explain`` / ``prove``
  / ``verify-proof``, ``store prune --json``: every exit code as documented, every JSON output
  with the documented keys, and the same outputs, modulo ids, keys and times, as the same walk on a
  SQLite file.
- A server that cannot be reached (a wrong port): every verb that needs the store says so in one
  line, exit 2, no traceback, the password (with ``@`` and ``/`` percent-encoded) masked, and no
  file or directory created (no token, no checkpoint, no ``.agentgate``); ``grant inspect`` shows
  ``revocation unknown`` / ``"revoked": null``; the verbs that need no store (``keys new``,
  ``policy lint`` / ``explain``, ``approval sign``, ``audit verify-proof``) work as without one.
- A password holding ``@`` and ``/`` written ``%40`` / ``%2F`` (in the user part or as
  ``?password=``) authenticates (scram-sha-256); written bare it is refused before connecting, a
  wrong one is libpq's reason; the password is never printed.
- A role without the rights: every verb fails closed (``grant check`` a deny, exit 1; the others
  exit 2, one line), nothing half written (no token file for a grant that could not be recorded,
  no revocation without its audit entry).

What did not hold, fixed in agentgate/cli/:

- A store URL naming an existing PostgreSQL database that holds no agentgate store (a mistyped
  database name: ``postgres``, another service's database) was taken for an empty store by the
  commands that only read: ``approval list`` said "no open approval requests", ``audit verify
  --key`` "intact: 0 entries", ``store prune`` pruned nothing, all exit 0, and each created
  agentgate's tables in that database, where a mistyped SQLite path is exit 2 ``no store at PATH``
  (docs/cli.md, Store). It is now exit 2, ``no store in the PostgreSQL database ...``, nothing
  created (``_common.open_existing_store``).
- A role without a right on a table got PostgreSQL's ``permission denied for table T``, which
  names the table but never the right; the error line now says which ``GRANT ... ON T`` the
  application role of docs/operations.md has there (``_common.privilege_hint``).
- ``grant issue``, ``delegate``, ``inspect`` and ``check`` never closed their store: on a busy
  machine about one ``grant check`` in three on PostgreSQL ended with ``Exception ignored in ...
  ConnectionPool.__del__`` and a traceback (``RuntimeError: cannot join current thread``) on
  stderr after its verdict (``grant._repo`` now closes it).

Seen, not changed: ``store init`` run by a role with no right on any table prints ``ready`` for
every part, exit 0 (the tables exist, so nothing is created); ``grant inspect`` by such a role
says ``revocation unknown (store unreachable)`` (the documented words) though the server answered;
``grant check`` by it is a deny whose reason says to "restore the store" (agentgate/authority);
``grant check`` cannot exit 3 (docs/cli.md: only a Gate with a policy asks for approval).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentgate.authority import parse_chain
from agentgate.capabilities import Call
from agentgate.cli._common import STORE_TABLES
from agentgate.cli.main import main
from agentgate.gate import Approval, Gate
from agentgate.keys import load_signing_key
from agentgate.policy import load_policy
from agentgate.store import open_store
from agentgate.store._postgres import PostgresStore

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[1]
OPERATIONS = ROOT / "docs" / "operations.md"
POLICY = ROOT / "policies" / "support.yaml"
KEY_NAMES = ("ops-root", "support-agent", "alice", "bob")


@dataclass
class Done:
    argv: tuple[str, ...]
    rc: int
    out: str
    err: str


def agentgate(cwd: Path, store: str | None, *argv: str, timeout: float = 60) -> Done:
    """``python -m agentgate ARGV`` in ``cwd`` with ``AGENTGATE_STORE=store`` (unset for None),
    none of the caller's other ``AGENTGATE_*`` variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTGATE_")}
    if store is not None:
        env["AGENTGATE_STORE"] = store
    done = subprocess.run(
        [sys.executable, "-m", "agentgate", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Done(tuple(argv), done.returncode, done.stdout, done.stderr)


def one_error_line(done: Done) -> str:
    """The one ``agentgate: error:`` line of a command that failed with exit 2."""
    assert done.rc == 2, done
    assert "Traceback" not in done.err, done
    assert done.err.count("\n") == 1 and done.err.startswith("agentgate: error: "), done
    return done.err


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``keys new`` for the support policy's trust anchor, agent and two leads (no store needed:
    made once, with ``AGENTGATE_STORE`` unset, and copied into each walk)."""
    made = tmp_path_factory.mktemp("keys")
    with ThreadPoolExecutor(4) as pool:
        done = list(pool.map(lambda n: agentgate(made, None, "keys", "new", n, "--dir", "keys"), KEY_NAMES))
    assert [d.rc for d in done] == [0] * 4, done
    assert all(re.fullmatch(r"did:key:z\w+\n", d.out) for d in done), done
    assert not (made / ".agentgate").exists()  # keys new opens no store
    return made / "keys"


def workdir(base: Path, keys: Path) -> Path:
    base.mkdir()
    shutil.copytree(keys, base / "keys")
    shutil.copy(POLICY, base / "support.yaml")  # its keys/*.pub are the ones just made
    return base


def role_url(owner_url: str, role: str, password: str = "") -> str:
    user = re.match(r"postgresql://([^@]*)@", owner_url)
    assert user is not None
    return owner_url.replace(f"postgresql://{user.group(1)}@", f"postgresql://{role}{password}@", 1)


def documented_app_role(owner_url: str, role: str) -> None:
    """Create ``role`` and give it what docs/operations.md grants ``agentgate_app``, its SQL
    block run as printed (the role's name changed: roles are the whole cluster's)."""
    page = OPERATIONS.read_text()
    start = page.index("```sql", page.index("grant the application role")) + len("```sql")
    block = page[start : page.index("```", start)]
    statements = [s.strip().replace("agentgate_app", role) for s in block.split(";") if s.strip()]
    assert statements[0].startswith("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES")
    with PostgresStore(owner_url) as owner, owner.transaction() as tx:
        tx.execute(f"CREATE ROLE {role} LOGIN")
        tx.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")  # PostgreSQL 15's default anyway
        for statement in statements:
            tx.execute(statement)


# --- the whole walk, PostgreSQL as the application role against SQLite ---------------------------


_HEX = re.compile(r"\b[0-9a-f]{16,64}\b")
_DID = re.compile(r"did:key:z[1-9A-HJ-NP-Za-km-z]+")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT[0-9:.]+Z")
_NUMBER = re.compile(r"\b\d{9,}(\.\d+)?\b")
_BASE64 = re.compile(r"[A-Za-z0-9+/]{40,}={0,2}")


def normalized(text: str, d: Path) -> str:
    """``text`` without what differs between two runs: the working directory, ids, keys, times."""
    text = text.replace(str(d), "D")
    for pattern, shown in ((_DID, "DID"), (_HEX, "H"), (_TIME, "T"), (_NUMBER, "N"), (_BASE64, "B64")):
        text = pattern.sub(shown, text)
    return text


def walk(d: Path, owner: str, app: str, before_app: Callable[[], None]) -> list[Done]:
    """The operator's lifecycle in ``d``: set up as ``owner``, then everything as ``app``; each
    step's exit code checked as docs/cli.md says. Returns every step, in order."""
    steps: list[Done] = []

    def step(expected: int, line: str, store: str = app) -> Done:
        done = agentgate(d, store, *shlex.split(line))
        assert done.rc == expected, done
        assert "Traceback" not in done.err, done
        steps.append(done)
        return done

    init = step(0, "store init", store=owner)
    assert init.out.splitlines()[0] == "audit log: ready" and len(init.out.splitlines()) == 13, init
    step(0, "audit checkpoint", store=owner)  # the log key and a first checkpoint
    before_app()

    issue = "grant issue --issuer keys/ops-root.key --to"
    step(0, f"{issue} keys/support-agent.pub --policy support.yaml --role support-agent --out agent.tok")
    step(
        0,
        f"{issue} keys/alice.pub --allow 'tool:payments.refund?amount<=500' --ttl 1h --budget 1000 --out alice.tok",
    )
    delegate = "grant delegate alice.tok --as keys/alice.key --to keys/bob.pub --ttl 10m"
    step(0, f"{delegate} --allow 'tool:payments.refund?amount<=100' --out bob.tok")
    wide = step(1, f"{delegate} --allow 'tool:payments.refund?amount<=1000' --out wide.tok")
    assert wide.err.startswith("deny: scope_creep constraint_widened [constraints.amount]: "), wide
    assert not (d / "wide.tok").exists()

    shown = json.loads(step(0, "grant inspect bob.tok --json").out)
    assert set(shown) == {"tip", "holder", "root_trusted", "links"}
    assert [(link["revoked"], link["signature"]) for link in shown["links"]] == [(False, "valid")] * 2
    alice_root = shown["links"][0]["id"]

    check = "grant check bob.tok --as keys/bob.key --trust keys/ops-root.pub --tool payments.refund"
    allowed = step(0, f"""{check} --args '{{"amount": 50}}'""")
    assert allowed.out.startswith("allow: tool:payments.refund invoke is covered by grant "), allowed
    denied = json.loads(step(1, f"""{check} --args '{{"amount": 500}}' --json""").out)
    assert set(denied) == {  # docs/cli.md, grant check --json
        *("outcome", "reasons", "findings", "principal", "resource", "action", "args_digest"),
        *("chain", "invocation_id", "budgets", "approval", "decided_at"),
    }
    assert denied["outcome"] == "deny" and denied["findings"][0]["code"] == "call_not_covered"
    assert set(denied["findings"][0]) <= {"kind", "code", "message", "severity", "grant", "field"}

    assert step(0, "grant revoke bob.tok --reason walk").out == f"revoked {shown['tip']}\n"
    after = step(1, f"""{check} --args '{{"amount": 50}}'""")
    assert "non_revocable_grant revoked" in after.out, after
    by_id = step(0, f"grant revoke {alice_root} --by ops")
    assert by_id.out == (
        f"revoked {alice_root}\n1 recorded descendant grant(s) are dead with it: {shown['tip']}\n"
    ), by_id
    tree = step(1, "grant inspect bob.tok")  # revoked links: exit 1 (review R61)
    assert tree.out.startswith("chain of 2 link(s); holder did:key:"), tree
    assert tree.out.count("[REVOKED]") == 2, tree

    # A Gate on the same store, as a gateway process would run it (as the application role).
    key_file = d / ".agentgate" / "log.key" if (d / ".agentgate").exists() else d / "log.key"
    store = open_store(app)
    gate = Gate(load_policy(d / "support.yaml"), store, log_key=load_signing_key(key_file))
    try:
        agent = gate.issue(
            load_signing_key(d / "keys/ops-root.key"),
            name="support-agent",
            key=load_signing_key(d / "keys/support-agent.key"),
            role="support-agent",
        )
        refund = Call.tool("payments.refund", {"order_id": "o-1", "amount": 800, "currency": "EUR"})
        asked = gate.authorize(agent, refund, agent="support-agent", call_id="refund-1")
        assert asked.needs_approval, asked
        (d / "payload.json").write_text(json.dumps(asked.approval_payload()))

        waiting = json.loads(step(0, "approval list --json").out)
        assert [set(row) for row in waiting] == [
            {"id", "requester", "call_hash", "quorum", "approved_by", "not_counted", "expires_at"}
        ]
        assert waiting[0]["id"] == asked.request["id"] and waiting[0]["approved_by"] == []  # type: ignore[index]
        signed = step(0, "approval sign payload.json --as keys/alice.key --out approval.json")
        assert "asks for   tool:payments.refund invoke" in signed.err, signed

        approval = Approval.parse(json.loads((d / "approval.json").read_text()))
        resumed = gate.authorize(agent, refund, agent="support-agent", call_id="refund-1", approval=approval)
        assert resumed.allowed, resumed
        assert gate.run(resumed, lambda: "refunded", call_id="refund-1") == "refunded"

        reply = Call.tool("tickets.reply", {"ticket_id": "t-1", "body": "hello"})
        replying = gate.authorize(agent, reply, agent="support-agent", call_id="reply-1")
        assert replying.allowed, replying

        def down() -> str:
            raise ConnectionError("helpdesk unreachable")

        with pytest.raises(ConnectionError):
            gate.run(replying, down, call_id="reply-1")
    finally:
        gate.close()
        store.close()
    settled_at = time.time()

    letters = json.loads(step(0, "tasks dead-letters --json").out)
    assert [(x["tool"], x["call_id"]) for x in letters] == [("tickets.reply", "reply-1")], letters
    unsettled = json.loads(step(0, "tasks unsettled --json").out)
    assert [set(row) for row in unsettled] == [
        {"key", "state", "allow_index", "resource", "principal", "allowed_at"}
    ]
    assert unsettled[0]["state"] == "error" and unsettled[0]["resource"] == "tool:tickets.reply"
    settle = step(0, f"tasks settle {unsettled[0]['key']} --not-run --reason walk")
    assert settle.out.startswith(f"settled {unsettled[0]['key']} (allowed by audit entry "), settle

    step(0, "audit checkpoint --out saved.checkpoint")
    verified = step(0, "audit verify --checkpoint saved.checkpoint")
    assert verified.out.startswith("intact: "), verified
    entries = [json.loads(line) for line in step(0, "audit show --json").out.splitlines()]
    kinds = [e["kind"] for e in entries]
    assert kinds[:2] == ["revoke", "revoke"] and "approval_given" in kinds and kinds[-1] == "outcome"
    given = str(kinds.index("approval_given"))
    explained = step(0, f"audit explain {given}")
    assert f"entry {given}: approval_given" in explained.out and "related entry" in explained.out
    proved = step(0, f"audit prove {given} --out entry.proof")
    assert proved.out.startswith(f"wrote the proof of entry {given} ") and (d / "entry.proof").exists()

    time.sleep(max(0.0, settled_at + 1.2 - time.time()))  # over for longer than --older-than 1s
    pruned = json.loads(step(0, "store prune --older-than 1s --json").out)
    assert set(pruned) == {"before", "pruned"}
    assert set(pruned["pruned"]) == {
        *("approval_requests", "settled_reservations", "dead_letters"),
        *("expired_grant_budgets", "expired_grants", "expired_grant_revocations"),
    }
    assert pruned["pruned"]["dead_letters"] == 1 and pruned["pruned"]["approval_requests"] == 0
    return steps


def _unwarned(err: str) -> str:
    return "".join(
        line
        for line in err.splitlines(keepends=True)
        if not line.startswith("agentgate: warning: the audit log's key is ")
    )


def test_the_whole_walk_as_the_application_role_matches_the_same_walk_on_sqlite(
    postgres_server: Any, keys: Path, tmp_path: Path
) -> None:
    owner = postgres_server.create_database()
    role = "r38cli_" + uuid.uuid4().hex[:8]
    app = role_url(owner, role)
    pg_dir, lite_dir = workdir(tmp_path / "pg", keys), workdir(tmp_path / "lite", keys)
    lite = str(lite_dir / "agentgate.db")
    with ThreadPoolExecutor(2) as pool:
        on_pg = pool.submit(walk, pg_dir, owner, app, lambda: documented_app_role(owner, role))
        on_lite = pool.submit(walk, lite_dir, lite, lite, lambda: None)
        pg_steps, lite_steps = on_pg.result(), on_lite.result()

    assert (pg_dir / ".agentgate" / "log.key").exists() and not (pg_dir / "agentgate.db").exists()
    # Review R71: on PostgreSQL the commands that take the log key from the default place before
    # the log's first checkpoint warn of it (tests/test_cli_r71_pg_log_key_default.py), which a
    # SQLite store, its key beside the database, does not: compared without that line.
    warned = [s.argv for s in pg_steps if "warning: the audit log's key is " in s.err]
    assert warned, warned
    for on, off in zip(pg_steps, lite_steps, strict=True):
        seen = [
            (normalized(" ".join(s.argv), d), s.rc, normalized(s.out, d), normalized(_unwarned(s.err), d))
            for s, d in ((on, pg_dir), (off, lite_dir))
        ]
        assert seen[0] == seen[1], on.argv
    assert len(pg_steps) == len(lite_steps)


# --- the grant verbs close their store ---------------------------------------------------------


def test_the_grant_verbs_close_their_postgresql_store(
    postgres_url: str, keys: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """``grant issue``, ``delegate``, ``inspect`` and ``check`` left their store open: the
    process exited with the pool's threads running, and the pool, collected wherever its last
    reference went, at times in one of its own workers, printed ``Exception ignored in ...
    ConnectionPool.__del__ ... RuntimeError: cannot join current thread`` with its traceback
    after the verdict (1 run in 3 of ``grant check`` on a busy machine). In-process, the threads
    the command started must be gone when it returns."""
    d = workdir(tmp_path / "w", keys)
    monkeypatch.chdir(d)
    monkeypatch.setenv("AGENTGATE_STORE", postgres_url)
    for name in [k for k in os.environ if k.startswith("AGENTGATE_") and k != "AGENTGATE_STORE"]:
        monkeypatch.delenv(name)
    for line in (
        "grant issue --issuer keys/ops-root.key --to keys/alice.pub --allow tool:search --ttl 1h --out a.tok",
        "grant delegate a.tok --as keys/alice.key --to keys/bob.pub --allow tool:search --ttl 5m --out b.tok",
        "grant inspect b.tok",
        "grant check b.tok --as keys/bob.key --trust keys/ops-root.pub --tool search",
    ):
        before = set(threading.enumerate())
        assert main(shlex.split(line)) == 0, capsys.readouterr()
        left = [t.name for t in set(threading.enumerate()) - before if t.is_alive()]
        assert left == [], (line, left)


# --- a server that cannot be reached -------------------------------------------------------------


def test_an_unreachable_server_is_one_line_exit_2_and_nothing_is_created(
    postgres_server: Any, keys: Path, tmp_path: Path
) -> None:
    d = workdir(tmp_path / "w", keys)
    elsewhere = str(tmp_path / "elsewhere.db")
    issued = agentgate(
        d,
        elsewhere,
        *shlex.split(
            "grant issue --issuer keys/ops-root.key --to keys/alice.pub --allow tool:search --ttl 1h --out a.tok"
        ),
    )
    assert issued.rc == 0, issued
    before = sorted(p.name for p in d.iterdir())
    wrong_port = postgres_server.port + 1
    url = f"postgresql://app:s%40cr%2Fet@/agentgate?host={postgres_server.socket_dir}&port={wrong_port}"

    needs_the_store = [
        "store init",
        "store prune --older-than 1d",
        "grant delegate a.tok --as keys/alice.key --to keys/bob.pub --allow tool:search --ttl 5m --out c.tok",
        "grant check a.tok --as keys/alice.key --trust keys/ops-root.pub --tool search",
        "grant revoke a.tok",
        "approval list",
        "audit checkpoint --out saved.checkpoint",
        "tasks settle k --ran",
        "broker queue",
    ]
    offline = [
        "grant inspect a.tok --json",
        """policy explain support.yaml --as support-agent --tool payments.refund
           --args '{"order_id": "o", "amount": 800, "currency": "EUR"}'""",
    ]
    with ThreadPoolExecutor(4) as pool:
        done = list(pool.map(lambda line: agentgate(d, url, *shlex.split(line)), needs_the_store + offline))

    for failed in done[: len(needs_the_store)]:
        line = one_error_line(failed)
        assert line.startswith("agentgate: error: cannot connect to PostgreSQL at postgresql://app:***@/"), (
            failed
        )
        assert "s%40cr" not in line and "s@cr" not in line and failed.out == "", failed
    inspected, explained = done[len(needs_the_store) :]
    assert inspected.rc == 0 and [link["revoked"] for link in json.loads(inspected.out)["links"]] == [None]
    assert explained.rc == 3, explained  # approval required: the policy alone decides, no store
    assert sorted(p.name for p in d.iterdir()) == before  # no token, checkpoint, .agentgate


# --- a mistyped database name ---------------------------------------------------------------------


def test_a_database_without_a_store_is_refused_by_the_reading_verbs_and_gets_no_tables(
    postgres_server: Any, tmp_path: Path
) -> None:
    """docs/cli.md, Store: the commands that only read refuse a store that does not exist instead
    of creating an empty one whose emptiness reads as an answer. A PostgreSQL database that holds
    no agentgate table (a mistyped name that exists) answered "no open approval requests",
    "intact: 0 entries", exit 0, and got 23 tables created in it. ``grant revoke ID`` is refused
    too (review r53: it created the tables, took the revocation there and said ``revoked ID``)."""
    url = postgres_server.create_database()
    (tmp_path / "log.pub").write_text("did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK\n")
    reading = [
        "approval list",
        "audit verify --key log.pub",
        "audit checkpoint",
        "tasks dead-letters",
        "broker leases",
        "store prune --older-than 1d",
        "grant revoke " + "a" * 64,
    ]
    with ThreadPoolExecutor(4) as pool:
        done = list(pool.map(lambda line: agentgate(tmp_path, url, *shlex.split(line)), reading))
    for refused in done:
        assert "no store in the PostgreSQL database" in one_error_line(refused), refused
        assert refused.out == ""
    tables = "SELECT tablename FROM pg_tables WHERE schemaname = 'public'"
    with PostgresStore(url) as owner:
        assert owner.query(tables) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log.pub"]

    assert agentgate(tmp_path, url, "store", "init").rc == 0
    listed = agentgate(tmp_path, url, "approval", "list")
    assert (listed.rc, listed.out) == (0, "no open approval requests\n"), listed
    with PostgresStore(url) as owner:  # the tables the refusal looks for: every one store init makes
        assert {row[0] for row in owner.query(tables)} == set(STORE_TABLES)


def test_check_delegate_and_serve_refuse_a_database_without_a_store_and_give_it_no_tables(
    postgres_server: Any, keys: Path, tmp_path: Path
) -> None:
    """A store URL naming a database that holds no agentgate table (a mistyped name that exists:
    ``postgres``, another service's): ``grant check`` created the tables there and decided against
    an empty revocation list (a revoked chain allowed, exit 0), ``grant delegate`` delegated under
    a parent revoked in the store in use, and ``serve`` served from it (review r53). Rule: as
    ``grant revoke``, exit 2, one line, ``no store in the PostgreSQL database ...``, no table
    created, no token written; after ``store init`` there, each works."""
    url = postgres_server.create_database()
    d = workdir(tmp_path / "w", keys)
    issued = agentgate(d, str(d / "issuing.db"), *shlex.split(
        "grant issue --issuer keys/ops-root.key --to keys/alice.pub --allow tool:search --ttl 1h --out a.tok"
    ))  # fmt: skip
    assert issued.rc == 0, issued
    check = "grant check a.tok --as keys/alice.key --trust keys/ops-root.pub --tool search"
    delegate = (
        "grant delegate a.tok --as keys/alice.key --to keys/bob.pub --allow tool:search --ttl 5m --out b.tok"
    )
    with socket.socket() as probe:  # a port free now: the store is what serve must refuse
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    serve = f"serve --policy support.yaml --inventory {ROOT / 'policies' / 'inventory.yaml'} --port {port}"
    for line in (check, delegate, serve):
        refused = agentgate(d, url, *shlex.split(line))
        assert "no store in the PostgreSQL database" in one_error_line(refused), refused
        assert refused.out == "" and "serving" not in refused.err, refused
    assert not (d / "b.tok").exists()
    with PostgresStore(url) as owner:
        assert owner.query("SELECT tablename FROM pg_tables WHERE schemaname = 'public'") == []
    assert agentgate(d, url, "store", "init").rc == 0
    assert agentgate(d, url, *shlex.split(check)).rc == 0
    assert agentgate(d, url, *shlex.split(delegate)).rc == 0 and (d / "b.tok").exists()


# --- a role without the rights --------------------------------------------------------------------


def test_a_role_without_rights_fails_closed_naming_the_grant_and_writes_nothing_half(
    postgres_server: Any, keys: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    owner = postgres_server.create_database()
    d = workdir(tmp_path / "w", keys)
    with monkeypatch.context() as setup:  # the owner's set-up, in-process (not under test here)
        setup.chdir(d)
        setup.setenv("AGENTGATE_STORE", owner)
        for line in (
            "store init",
            "grant issue --issuer keys/ops-root.key --to keys/alice.pub --allow tool:search --ttl 1h --out a.tok",
            "audit checkpoint",
        ):
            assert main(shlex.split(line)) == 0, line
    capsys.readouterr()
    tip = parse_chain((d / "a.tok").read_text().strip()).id
    suffix = uuid.uuid4().hex[:8]
    nobody, reader = role_url(owner, f"r38none_{suffix}"), role_url(owner, f"r38read_{suffix}")
    with PostgresStore(owner) as store, store.transaction() as tx:
        tx.execute(f"CREATE ROLE r38none_{suffix} LOGIN")
        tx.execute(f"CREATE ROLE r38read_{suffix} LOGIN")  # reads all, may record a revocation only
        tx.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO r38read_{suffix}")
        tx.execute(f"GRANT INSERT ON agentgate_revocations TO r38read_{suffix}")
    before = sorted(p.name for p in d.rglob("*"))

    every_right, append_only = "SELECT, INSERT, UPDATE, DELETE", "SELECT, INSERT"
    refused = [  # (store, command line, the table named, the rights the hint grants)
        (nobody, "grant issue --issuer keys/ops-root.key --to keys/bob.pub --allow tool:search --ttl 1h --out b.tok",
         "agentgate_grants", append_only),
        (nobody, "grant revoke a.tok", "agentgate_revocations", append_only),
        (nobody, "approval list", "approvals", every_right),
        (nobody, "audit show", "audit_log", append_only),
        (nobody, "tasks unsettled", "agentgate_once", every_right),
        (reader, "grant revoke a.tok", "audit_log", append_only),  # the revocation, not its entry
        (reader, "store prune --older-than 1d", "approval_votes", every_right),
    ]  # fmt: skip
    check = "grant check a.tok --as keys/alice.key --trust keys/ops-root.pub --tool search"
    with ThreadPoolExecutor(4) as pool:
        checked = pool.submit(agentgate, d, nobody, *shlex.split(check))
        done = list(pool.map(lambda row: agentgate(d, row[0], *shlex.split(row[1])), refused))
    for failed, (_, _, table, rights) in zip(done, refused, strict=True):
        line = one_error_line(failed)
        assert f"permission denied for table {table}" in line, failed
        assert f"GRANT {rights} ON {table} TO that role" in line, failed
        assert "lists what to grant" not in line, line  # one hint, the table's (review R81: two)
    assert checked.result().rc == 1 and checked.result().out.startswith("deny: "), checked.result()
    # Failing closed, with what can make the store answer: its role's rights among them (review
    # R81: "restore the store and retry" alone).
    assert "granted the rights docs/operations.md" in checked.result().out, checked.result()

    assert sorted(p.name for p in d.rglob("*")) == before  # no b.tok, no temporary file beside it
    with PostgresStore(owner) as store:  # the revocation went with its audit entry: neither
        assert store.query("SELECT grant_id FROM agentgate_revocations") == []
        assert store.query("SELECT count(*) FROM audit_log") == [(0,)]
        assert store.query("SELECT count(*) FROM agentgate_grants WHERE id <> ?", (tip,)) == [(0,)]


# --- a password holding @ and / -------------------------------------------------------------------


def test_a_password_with_at_and_slash_percent_encoded_authenticates(
    postgres_server: Any, tmp_path: Path
) -> None:
    """docs/operations.md: a user name or password holding ``@`` or ``/`` is written ``%40`` /
    ``%2F``. Checked against scram-sha-256 for this one role (the session's server trusts every
    other), so a password decoded wrongly would not connect."""
    owner = postgres_server.create_database()
    role, password = f"r38pw_{uuid.uuid4().hex[:8]}", "p@ss/w:rd%x"
    hba = Path(postgres_server.data) / "pg_hba.conf"
    original = hba.read_text()
    with PostgresStore(owner) as store:
        assert agentgate(tmp_path, owner, "store", "init").rc == 0
        with store.transaction() as tx:
            tx.execute(f"CREATE ROLE {role} LOGIN PASSWORD '{password}'")
            tx.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}")
        hba.write_text(f"local all {role} scram-sha-256\n{original}")
        try:
            store.query("SELECT pg_reload_conf()")
            encoded = "p%40ss%2Fw%3Ard%25x"
            forms = [
                role_url(owner, role, ":" + encoded),
                role_url(owner, role) + f"&password={encoded}",
                role_url(owner, role, ":wrong"),
                role_url(owner, role, ":p@ss/w:rd"),
            ]
            with ThreadPoolExecutor(4) as pool:
                done = list(pool.map(lambda url: agentgate(tmp_path, url, "approval", "list"), forms))
        finally:
            hba.write_text(original)
            store.query("SELECT pg_reload_conf()")
    assert [(d.rc, d.out) for d in done[:2]] == [(0, "no open approval requests\n")] * 2, done
    assert "password authentication failed" in one_error_line(done[2])
    assert "%40 and %2F" in one_error_line(done[3])
    assert not any("p@ss" in d.err or "p%40ss" in d.err or "wrong" in d.err for d in done), done
