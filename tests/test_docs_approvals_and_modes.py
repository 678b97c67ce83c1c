"""The docs on approvals, superseded requests, file modes and pruning (the paragraphs of
``git diff 5d3c2e9 -- docs``) say what the code does. Each claim is checked against the real command
(``agentgate.cli.main.main``, or a child process run as another user), real SQLite files, a real
``Gate`` and real LangGraph agents over ``ScriptedChatModel``. Helpers come from the model of this
file, tests/test_docs_prune_and_store.py, and from the tests that pinned this session's fixes.

Claims already pinned exactly elsewhere (not repeated here):

- a new store 0600 and its directory 0700 under umask 022 and 000, an existing store keeping its
  mode, a device / directory / FIFO / path under a file refused as one line with nothing created,
  a foreign ``audit_log`` refused by ``store init``, a read command on a database with no table
  in common refused byte for byte (tests/test_store_hostile_files.py);
- ``GatedBroker.reconcile``: a granted lost lease charged what was reserved, never more, a lost
  waiting request returned "it never held GPUs" (tests/test_broker_gated.py,
  tests/test_broker_restart_budget.py);
- superseded requests at the Gate: closed as ``agentgate:superseded`` with a ``deny`` entry that
  refers to the ``approval_required`` entry and copies its redacted args, resource, rule and
  chain; ``approval_calls`` pruned with its requests; the appended corrected answer closing the
  old request (tests/test_gate_approvals.py, tests/test_langgraph.py, tests/test_langgraph_time_travel.py);
- injected arguments forged by the model left out, a middleware-hidden tool decided by the
  policy, a tool's own ``interrupt()`` beside an approval, ``sub_agent_steers_parent`` recorded as
  the sub-agent's deny, context editing (tests/test_langgraph_langchain_features.py,
  tests/test_langgraph_langchain_features2.py).

What holds (tested here):

- the new public names the docs use are the code's: ``AuditLog.referring``, ``Gate.authorize``'s
  ``asked_in``, ``agentgate:superseded``, the table ``approval_calls``; ``sub_agent_steers_parent``
  is under ``implicit_trust_inheritance`` in the code as in docs/concepts.md's table;
- Growth and pruning: every table the ``approvals`` row names is pruned with its request;
- a policy constraint on an injected argument is never met: the call is refused as missing it,
  whatever the model wrote for it, and the tool never runs;
- an ``interrupt()`` in a sub-agent's tool pauses the supervisor's run (sync and async) and the
  resume reaches it: the ``Command.PARENT`` check does not swallow it, nothing is refused;
- two calls of one model answer that share an id are both refused before either is asked for
  (review R52; until then each got its own request in the same version and neither was closed);
- ``approval list`` does not list a superseded request (docs/cli.md: "pending"), ``approval sign``
  still signs its payload (signing decides nothing; exit 0), and that approval runs nothing: the
  old call asked again is a new request with no vote (docs/langgraph.md). (Observation, not a
  false claim: the "superseded, its call was changed" refusal of 93a09ac is what
  ``ApprovalStore.approve``/``consume`` say; through ``Gate.authorize`` such an approval is
  silently not counted, the caller sees a fresh ``approval_required``.)
- the auditor's copy that docs/operations.md now describes (the owner's ``sqlite3 ... ".backup"``
  into a directory the auditor owns) verifies as that other account, with ``--key log.pub``.

What did not hold:

- docs/operations.md, "Who may read the SQLite file": "give that account a group and ``chmod
  0640`` the file and ``0750`` its directory" to let it run ``agentgate audit verify``. It does
  not: SQLite reads a WAL database through its ``-shm`` file, which it must create beside the
  database when no process has the store open, so the other account's ``audit verify`` (with
  ``--key log.pub`` or not), ``approval list`` and ``audit show`` are each exit 2 "attempt to write
  a readonly database". Opening the directory to the group (0770) is worse: the reader's
  connection leaves ``-wal``/``-shm`` files owned by it, and the application can then no longer
  write its own store. Wording fixed (a copy for the auditor); the first two facts are pinned
  below (``test_the_group_read_modes_alone_do_not_let_another_account_verify``,
  ``test_a_group_writable_directory_lets_a_reader_lock_the_owner_out``).
- docs/operations.md: "a SQLite file of another application whose tables have agentgate's names
  but not its columns (its own ``audit_log``, say)" is refused, and "a command that only reads
  (``approval list``, ``audit verify``, ``store prune``) refuses another application's database
  without writing to it". Only ``store init`` (and a part whose own table is the foreign one)
  refuses it: ``approval list`` on a file holding another application's ``audit_log`` answers "no
  open approval requests" (exit 0) and creates agentgate's grant and approval tables in it;
  ``store prune`` creates the budget, approval and dead-letter tables; ``audit verify`` switches
  it to WAL mode before failing on the log key. The read-only inspection in
  ``agentgate/cli/_common.py`` (``open_existing_store``) refuses only a file with no table in
  common. Was a strict xfail, ``test_a_read_command_never_writes_into_a_database_with_a_foreign_audit_log``;
  fixed by the lead (the paragraph now says both refusals), as proposed: in ``open_existing_store``, before
  ``open_store``, read (read-only) the columns of each agentgate-named table the file holds and
  refuse one that lacks a column agentgate's DDL requires (``_sqlite._required_columns`` over
  every part's DDL), as ``ensure_schema`` does for its own part.
"""

from __future__ import annotations

import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
import test_langgraph_langchain_features2 as lc2
import test_langgraph_time_travel as timetravel
from _cli import cli as run
from _raw_sqlite import opened
from langchain_core.messages import AIMessage
from langchain_core.tools import InjectedToolCallId
from langgraph.prebuilt import InjectedState
from langgraph.types import Command, interrupt
from test_docs_prune_and_store import DOCS, section
from test_gate_approvals import Approvals, _request_id
from test_langgraph_langchain_features import Rig, _calls, _tool

from agentgate.findings import FindingKind
from agentgate.gate import Approval, Gate
from agentgate.integrations import langgraph as lg
from agentgate.integrations.langgraph import _delegation as lg_delegation
from agentgate.keys import save_key
from agentgate.store import Store
from agentgate.store.approvals import APPROVAL_CHILDREN, SUPERSEDED, ApprovalStore
from agentgate.store.audit import AuditLog

ROOT = Path(__file__).resolve().parents[1]
NOBODY = 65534
AUDITORS = 4243  # a group id no account has: the auditor's group


@pytest.fixture(autouse=True)
def _no_agentgate_variables(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("AGENTGATE_STORE", "AGENTGATE_LOG_KEY", "AGENTGATE_AUDIT_MAX_ENTRY_BYTES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)


# --- names the new paragraphs use ------------------------------------------------------------------


def test_the_new_names_are_spelled_as_in_the_code() -> None:
    langgraph_md = (DOCS / "langgraph.md").read_text()
    assert "Gate.authorize(..., asked_in=(scope, version))" in langgraph_md
    assert "asked_in" in inspect.signature(Gate.authorize).parameters
    assert f"`{SUPERSEDED}`" in langgraph_md and "`approval_calls`" in langgraph_md
    assert "approval_calls" in APPROVAL_CHILDREN
    assert callable(AuditLog.referring)
    concepts = (DOCS / "concepts.md").read_text()
    (row,) = [line for line in concepts.splitlines() if line.startswith("| `implicit_trust_inheritance`")]
    assert "`sub_agent_steers_parent`" in row
    finding = lg_delegation._STEERS_PARENT
    assert (finding.kind, finding.code) == (FindingKind.IMPLICIT_TRUST_INHERITANCE, "sub_agent_steers_parent")


def test_every_table_the_approvals_row_names_is_pruned_with_its_request() -> None:
    table = section("operations.md", "## Growth and pruning")
    (row,) = [line for line in table.splitlines() if line.startswith("| `approvals`")]
    named = re.findall(r"`([a-z_]+)`", row.split("|")[1])
    assert named[0] == "approvals" and set(named[1:]) == set(APPROVAL_CHILDREN)


# --- Who may read the SQLite file ----------------------------------------------------------------

_AS_AUDITOR = f"""
import os, sys
import agentgate.store._postgres
from agentgate.cli.main import build_parser, main
build_parser()
if os.geteuid() == 0:
    os.setgroups([{AUDITORS}]); os.setgid({NOBODY}); os.setuid({NOBODY})
os.umask(0o022)
sys.exit(main(sys.argv[1:]))
"""


def as_auditor(*argv: str) -> tuple[int, str, str]:
    """``agentgate ARGV`` as another account (``nobody``) in the group ``AUDITORS``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("AGENTGATE_STORE", None)
    done = subprocess.run(
        [sys.executable, "-c", _AS_AUDITOR, *argv],
        cwd="/",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, done.stdout, done.stderr


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="drops to another account: needs root")


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory outside pytest's root-only tmp_path that other accounts can enter."""
    path = Path(tempfile.mkdtemp(prefix="agentgate-r43-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _made_store(base: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """A store with a signed checkpoint in ``base/store`` (the owner: this process)."""
    store = base / "store" / "agentgate.db"
    assert run(capsys, "store", "init", "--store", str(store))[0] == 0
    assert run(capsys, "audit", "checkpoint", "--store", str(store))[0] == 0
    shutil.copy(store.parent / "log.pub", base / "log.pub")
    (base / "log.pub").chmod(0o644)
    return store


@needs_root
def test_the_group_read_modes_let_another_account_read_a_store_not_in_use(
    shared_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A group, chmod 0640 the file and 0750 its directory. No agentgate process has the store open
    # (no -wal, no -shm): until review R56 SQLite had to create a -shm to read the WAL database
    # (exit 2, "attempt to write a readonly database"); a verb that only reads now opens it to
    # read only, and creates nothing beside it.
    store = _made_store(shared_dir, capsys)
    assert sorted(p.name for p in store.parent.iterdir()) == ["agentgate.db", "log.key", "log.pub"]
    os.chown(store, 0, AUDITORS)
    store.chmod(0o640)
    os.chown(store.parent, 0, AUDITORS)
    store.parent.chmod(0o750)
    for argv in (["audit", "verify", "--key", str(shared_dir / "log.pub")], ["approval", "list"]):
        code, _out, err = as_auditor(*argv, "--store", str(store))
        assert code == 0 and err == "", (argv, code, err)
    assert sorted(p.name for p in store.parent.iterdir()) == ["agentgate.db", "log.key", "log.pub"]
    text = " ".join(section("operations.md", "**Who may read the SQLite file.**", "\n\n").split())
    assert "read a store that no process has open (no `-wal` beside it) in place" in text


@needs_root
def test_a_group_writable_directory_lets_a_reader_lock_the_owner_out(shared_dir: Path) -> None:
    # Why the paragraph warns against opening the directory to the group: the reader's
    # connection leaves -wal/-shm files of its own, which the owner may then only read.
    owner = 1000
    directory = shared_dir / "store"
    directory.mkdir()
    path = directory / "x.db"
    with opened(path) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE t (a)")
    os.chown(path, owner, AUDITORS)
    path.chmod(0o640)
    os.chown(directory, owner, AUDITORS)
    directory.chmod(0o770)

    def as_(uid: int, statement: str) -> subprocess.CompletedProcess[str]:
        code = (
            f"import os, sqlite3\nos.setgroups([{AUDITORS}]); os.setgid({AUDITORS}); os.setuid({uid})\n"
            f"sqlite3.connect({str(path)!r}, isolation_level=None).execute({statement!r})"
        )
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)

    assert as_(NOBODY, "SELECT * FROM t").returncode == 0
    assert (directory / "x.db-shm").stat().st_uid == NOBODY
    refused = as_(owner, "INSERT INTO t VALUES (1)")
    assert refused.returncode == 1 and "attempt to write a readonly database" in refused.stderr
    text = section("operations.md", "**Who may read the SQLite file.**", "\n\n")
    assert "0770" in text or "group-writable" in text or "writable by the group" in text


@needs_root
@pytest.mark.skipif(shutil.which("sqlite3") is None, reason="the sqlite3 command line tool")
def test_the_copy_the_paragraph_describes_verifies_as_another_account(
    shared_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = _made_store(shared_dir, capsys)
    text = section("operations.md", "**Who may read the SQLite file.**", "\n\n")
    shown = re.search(r'`sqlite3 (\S+) "\.backup (\S+)"`', text)
    assert shown is not None, text
    audit = shared_dir / "audit"
    audit.mkdir()
    os.chown(audit, NOBODY, NOBODY)  # the auditor's own directory
    copy = audit / "agentgate.db"
    subprocess.run(["sqlite3", str(store), f".backup {copy}"], check=True, timeout=60)
    code, out, err = as_auditor("audit", "verify", "--store", str(copy), "--key", str(shared_dir / "log.pub"))
    assert code == 0 and out.startswith("intact: ") and "1 checkpoint\n" in out, err
    assert "`agentgate audit verify --store" in text and "--key" in text


def _foreign_with_audit_log(path: Path) -> bytes:
    with opened(path) as db:
        db.executescript(
            "CREATE TABLE audit_log (x); INSERT INTO audit_log VALUES (1); CREATE TABLE users (id);"
        )
    return path.read_bytes()


@pytest.mark.parametrize(
    "argv", [["approval", "list"], ["store", "prune", "--older-than", "1d"], ["audit", "verify"]]
)
def test_a_read_command_never_writes_into_a_database_with_a_foreign_audit_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    path = tmp_path / "other.db"
    data = _foreign_with_audit_log(path)
    code, out, err = run(capsys, *argv, "--store", str(path))
    assert code == 2 and out == "" and str(path) in err and len(err.strip().splitlines()) == 1
    assert path.read_bytes() == data and sorted(p.name for p in tmp_path.iterdir()) == ["other.db"]


def test_the_paragraph_says_what_a_foreign_audit_log_meets_today(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # store init refuses it whole; since the lead's fix in R43 a command that only reads refuses
    # it too (the test above), and the paragraph says both.
    path = tmp_path / "other.db"
    _foreign_with_audit_log(path)
    code, _out, err = run(capsys, "store", "init", "--store", str(path))
    assert code == 2 and "audit_log" in err and "not agentgate's" in err
    code, out, err = run(capsys, "approval", "list", "--store", str(path))
    assert code == 2 and out == "" and "audit_log" in err and "not agentgate's" in err
    with opened(path) as db:
        assert db.execute("SELECT COUNT(*) FROM sqlite_master WHERE name = 'approvals'").fetchone() == (0,)
    text = " ".join(section("operations.md", "**Who may read the SQLite file.**", "\n\n").split())
    assert "`store init` refuses" in text and "refuses, through a read-only connection, both" in text


# --- docs/langgraph.md ---------------------------------------------------------------------------


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    made = Rig(tmp_path)
    yield made
    made.gate.close()


@pytest.mark.parametrize("forged", [None, "acme-1"])
def test_a_constraint_on_an_injected_argument_is_never_met(rig: Rig, forged: str | None) -> None:
    # The policy's pay capability constrains ``account`` (prefix acme-); here the tool takes it
    # from the graph state, so the model is never shown it: whatever the model writes, the call
    # is refused as missing it, and the tool never runs.
    def pay(amount: int, account: Annotated[str, InjectedState("account")]) -> str:
        rig.ran.append(f"pay:{amount}:{account}")
        return "paid"

    from langgraph.graph import END, START, MessagesState, StateGraph

    class State(MessagesState):
        account: str

    graph = StateGraph(State)
    graph.add_node("tools", lg.gated_tool_node(rig.gate, [_tool(pay)], agent="supervisor"))
    graph.add_edge(START, "tools")
    graph.add_edge("tools", END)
    args: dict[str, Any] = {"amount": 5} if forged is None else {"amount": 5, "account": forged}
    result = graph.compile().invoke(
        {"messages": [_calls(("pay", args))], "account": "acme-2"}, context=rig.me
    )
    assert rig.ran == []
    (answer,) = [m for m in result["messages"] if getattr(m, "tool_call_id", None) == "pay-0"]
    assert answer.status == "error"
    (denied,) = [e for e in rig.entries() if e.resource == "tool:pay"]
    assert denied.kind == "deny" and denied.args == {"amount": 5}
    # The grant's own constraint refuses it first, as the gateway would (review R59); the policy's
    # rule ("requires argument 'account'") refuses it too.
    assert any("argument account is required" in reason for reason in denied.reasons), denied.reasons


def test_an_injected_tool_call_id_constraint_is_never_met_either(rig: Rig) -> None:
    # The same with InjectedToolCallId under the constrained name, through create_gated_agent.
    def pay(amount: int, account: Annotated[str, InjectedToolCallId]) -> str:
        rig.ran.append(f"pay:{amount}:{account}")
        return "paid"

    model = lg.ScriptedChatModel(
        turns=[_calls(("pay", {"amount": 5, "account": "acme-9"})), AIMessage(content="done")]
    )
    agent = lg.create_gated_agent(rig.gate, name="supervisor", model=model, tools=[_tool(pay)])
    agent.invoke({"messages": [{"role": "user", "content": "go"}]}, context=rig.me)
    assert rig.ran == []
    assert [kind for kind, _ in rig.of("tool:pay")] == ["deny"]


def test_two_calls_of_one_answer_sharing_an_id_are_refused_before_either_is_asked(tmp_path: Path) -> None:
    # Review R52 (docs/langgraph.md, "Tool calls that share an id"): until then each was asked for
    # in the same version and neither closed the other's request; now neither is asked for.
    rig = timetravel._rig(tmp_path)
    try:
        answer = timetravel._turn(
            ("publish", {"path": "reports/a"}, "same-id"), ("publish", {"path": "reports/b"}, "same-id")
        )
        graph = timetravel._agent(rig, answer)
        done = graph.invoke(timetravel.GO, timetravel._thread("shared-id"), context=rig.agent)
        assert "__interrupt__" not in done
        assert len(rig.pending_requests()) == 0
        assert [e.kind for e in rig.entries() if e.resource == "tool:publish"] == ["deny", "deny"]
        assert rig.ran == []
    finally:
        rig.gate.close()


# --- docs/cli.md of a superseded request -------------------------------------------------------------


def test_list_and_sign_of_a_superseded_request_say_nothing_false(
    sqlite_store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    approvals = Approvals(sqlite_store)
    try:
        first = approvals.ask(500, "m", "v1")
        old = _request_id(first)
        new = _request_id(approvals.ask(900, "m", "v2"))  # the edit closes the first request
        approvals.gate.flush()
        code, out, _ = run(capsys, "approval", "list", "--json", "--store", str(sqlite_store.url))
        assert code == 0 and [r["id"] for r in json.loads(out)] == [new]  # "pending": not the old one
        payload = tmp_path / "old.json"
        payload.write_text(json.dumps(first.approval_payload()))
        key, _pub = save_key(approvals.keys["lead"], tmp_path / "keys", "lead")
        code, signed, err = run(capsys, "approval", "sign", str(payload), "--as", str(key))
        assert code == 0, err  # signing decides nothing
        vote = Approval.parse(json.loads(signed))
        refused = approvals.ask(500, "m", "v1", approval=vote)
        # "the approval signed for the old arguments runs nothing": the old call asked again is
        # a new request, and the signed vote counts for nothing there.
        assert not refused.allowed and refused.request is not None
        assert _request_id(refused) not in (old, new) and refused.request["approved_by"] == []
        assert ApprovalStore(approvals.gate.store).get(old).state == "denied"
    finally:
        approvals.gate.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_an_interrupt_in_a_sub_agent_still_pauses_the_supervisors_run(tmp_path: Path, mode: str) -> None:
    # docs/langgraph.md, "Sub-agents cannot steer the supervisor": the ParentCommand check must
    # not swallow the sub-agent's interrupt (GraphInterrupt is a GraphBubbleUp, as ParentCommand).
    rig = lc2.Rig(tmp_path)
    try:

        def route(to: str) -> str:
            answer = interrupt({"confirm": to})
            rig.ran.append(f"route:{to}:{answer}")
            return "routed"

        team = lc2._team(rig, route)
        config = {"configurable": {"thread_id": f"sub-{mode}"}}
        paused = lc2._run(team, mode, lc2.GO, config, context=rig.me)
        (pending,) = paused["__interrupt__"]
        assert pending.value == {"confirm": "x"} and rig.ran == []
        assert "deny" not in rig.kinds("tool:ask_researcher")
        done = lc2._run(team, mode, Command(resume="yes"), config, context=rig.me)
        assert "__interrupt__" not in done and rig.ran == ["route:x:yes"]
        assert lc2._answers(done)["ask_researcher-0"].status == "success"
        assert not [e for e in rig.entries() if e.kind == "deny"]
    finally:
        rig.gate.close()
