"""Revocation by holder (``agentgate grant revoke --holder``, ``revoke_holder``).

Review R44 found that an operator who learns an agent's private key leaked had no one-step way to
cut it off: docs/operations.md gave a SQL query for the key's grants and one ``grant revoke ID``
per row. This file checks the command and API that replace it, on SQLite and PostgreSQL:

What holds:
- ``grant revoke --holder DID|PUBFILE`` revokes every grant the store records with that key as
  audience, in one transaction with one ``revoke`` audit entry per grant revoked (principal
  ``--by``, the reason); the recorded descendants, and a grant the leaked key delegated offline
  (never recorded), are refused from the next decision; a grant to another key is not touched;
  ``audit verify`` stays clean; a second run revokes nothing new, logs nothing, exit 0;
- a key with no recorded grants is exit 0, "no recorded grants", and the output says that a
  grant to the key this store never recorded is not covered (such a grant still decides allow);
- bad input (a malformed did, a missing or garbage file, both or neither of TOKENFILE|ID and
  ``--holder``, a ``--store`` that does not exist) is exit 2, one line, nothing revoked, no store
  created;
- an audit append that fails (a planted SQLite trigger) leaves no grant revoked: revocations
  and their entries commit together;
- a grant recorded for the holder while the command runs is either revoked and audited, or
  neither; the revoked ones are exactly those recorded before the command read them (a prefix
  of the recording order);
- PostgreSQL's application role, with exactly the rights docs/operations.md grants it
  (``agentgate_revocations``: SELECT and INSERT only), can run it;
- the Python API (``revoke_holder``, ``Authority.revoke_holder``): typed errors for a holder
  that is no did:key and a reason that is not text, nothing written; inside a bound transaction
  that rolls back, nothing is revoked.

What does not hold (documented, not a defect): a grant to the key that this store never recorded
is not revoked; only removing the key from the policy and restarting refuses it.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentgate.authority import Authority, Chain, GrantRepository, Invocation, decide, delegate, issue, record
from agentgate.authority._revocation import revoke_holder
from agentgate.capabilities import Call
from agentgate.cli.main import main
from agentgate.errors import InputError, KeyFileError
from agentgate.findings import Outcome
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore, Store, open_store

KEYS = {n: SigningKey.generate() for n in ("root", "root2", "agent", "other", "evil")}
CALL = Call.tool("lookup", {})
CAP = ["tool:lookup"]
OPERATIONS = Path(__file__).resolve().parent.parent / "docs" / "operations.md"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The store the CLI uses (``AGENTGATE_STORE``), the log key under ``tmp_path``."""
    monkeypatch.chdir(tmp_path)
    for name in ("AGENTGATE_LOG_KEY", "AGENTGATE_LOG_PREVIOUS_KEYS", "AGENTGATE_LOG_ORIGIN"):
        monkeypatch.delenv(name, raising=False)
    target = str(tmp_path / "ag.db") if request.param == "sqlite" else request.getfixturevalue("postgres_url")
    monkeypatch.setenv("AGENTGATE_STORE", target)
    return target


@pytest.fixture
def repo(url: str) -> Iterator[GrantRepository]:
    store = open_store(url)
    grants = GrantRepository(store)
    yield grants
    grants.close()
    store.close()


def recorded(repo: GrantRepository, chain: Chain) -> Chain:
    record(repo, chain)
    return chain


def outcome(repo: GrantRepository, key: SigningKey, chain: Chain) -> tuple[Outcome, str | None]:
    d = decide(
        Invocation.sign(key, chain, CALL), repo=repo, trusted=[KEYS["root"].public, KEYS["root2"].public]
    )
    return d.outcome, (d.findings[0].code if d.findings else None)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    try:
        rc = main(list(argv))
    except SystemExit as exc:  # argparse's usage errors
        rc = int(exc.code or 0)
    out, err = capsys.readouterr()
    return rc, out, err


def revoke_entries(capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    rc, out, err = cli(capsys, "audit", "show", "--kind", "revoke", "--json")
    assert rc == 0, err
    return [json.loads(line) for line in out.splitlines()]


def revocations(store: Store) -> set[str]:
    return {str(r[0]) for r in store.query("SELECT grant_id FROM agentgate_revocations")}


# --- the command ------------------------------------------------------------------------------------


def test_revoke_holder_cuts_off_every_recorded_grant_and_what_is_below_it(
    repo: GrantRepository, capsys: pytest.CaptureFixture[str]
) -> None:
    agent, root, root2 = KEYS["agent"], KEYS["root"], KEYS["root2"]
    one = recorded(repo, issue(root, agent.public, CAP, ttl=600))
    two = recorded(repo, issue(root2, agent.public, CAP, ttl=600))
    below = recorded(repo, delegate(one, agent, KEYS["other"].public, CAP, ttl=60))
    others = recorded(repo, issue(root, KEYS["other"].public, CAP, ttl=600))
    stolen = delegate(two, agent, KEYS["evil"].public, CAP, ttl=60)  # the thief's, never recorded
    calls = [(agent, one), (agent, two), (KEYS["other"], below), (KEYS["evil"], stolen)]
    assert [outcome(repo, k, c)[0] for k, c in [*calls, (KEYS["other"], others)]] == [Outcome.ALLOW] * 5
    pub = Path("agent.pub")
    pub.write_text(agent.did + "\n")

    rc, out, err = cli(
        capsys, "grant", "revoke", "--holder", str(pub), "--reason", "key leaked", "--by", "ops", "--json"
    )
    assert (rc, err) == (0, ""), err
    shown = json.loads(out)
    assert shown["holder"] == agent.did
    assert shown["revoked"] == sorted([one.id, two.id]) and shown["already_revoked"] == []
    assert shown["descendants"] == [below.id]
    assert "never recorded" in shown["not_covered"]
    assert [outcome(repo, k, c) for k, c in calls] == [(Outcome.DENY, "revoked")] * 4
    assert outcome(repo, KEYS["other"], others) == (Outcome.ALLOW, None)  # another key's grant stays
    entries = revoke_entries(capsys)
    assert sorted(e["chain_hash"] for e in entries) == sorted([one.id, two.id])  # type: ignore[type-var]
    assert {(e["principal"], tuple(e["reasons"])) for e in entries} == {("ops", ("key leaked",))}  # type: ignore[arg-type]
    assert cli(capsys, "audit", "verify")[0] == 0

    # again (after the policy change, as docs/operations.md says): nothing new, nothing logged
    rc, out, err = cli(capsys, "grant", "revoke", "--holder", agent.did, "--reason", "again")
    assert (rc, err) == (0, "")
    assert out.splitlines()[:3] == [
        f"revoked 0 grant(s) held by {agent.did}",
        "2 grant(s) it holds were already revoked",
        "1 recorded descendant grant(s) are dead with them",
    ]
    assert out.splitlines()[3].startswith("note: grants to did:key:") and "never recorded" in out
    assert len(revoke_entries(capsys)) == 2
    assert cli(capsys, "audit", "verify")[0] == 0


def test_a_holder_without_recorded_grants_is_exit_0_and_told_what_is_not_covered(
    repo: GrantRepository, capsys: pytest.CaptureFixture[str]
) -> None:
    agent = KEYS["agent"]
    offline = issue(KEYS["root"], agent.public, CAP, ttl=600)  # issue() alone: never recorded
    rc, out, err = cli(capsys, "grant", "revoke", "--holder", agent.did)
    assert (rc, err) == (0, "")
    assert out.splitlines()[0] == f"no recorded grants held by {agent.did} in this store: nothing revoked"
    assert "never recorded" in out.splitlines()[1] and "remove the key from the policy" in out
    assert outcome(repo, agent, offline) == (Outcome.ALLOW, None)  # the documented gap
    assert revocations(repo.store) == set() and revoke_entries(capsys) == []


@pytest.mark.parametrize(
    "argv",
    [
        ["--holder", "did:key:zNOTAKEY"],
        ["--holder", "missing.pub"],
        ["--holder", "garbage.pub"],
        ["--holder", ""],
        ["--holder", "DID", "0" * 64],
        [],
        ["--holder", "DID", "--store", "elsewhere/none.db"],
    ],
    ids=["bad-did", "missing-file", "garbage-file", "empty", "both", "neither", "no-store"],
)
def test_bad_holder_input_is_exit_2_one_line_and_revokes_nothing(
    repo: GrantRepository, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    grant = recorded(repo, issue(KEYS["root"], KEYS["agent"].public, CAP, ttl=600))
    Path("garbage.pub").write_text("not a key\n")
    argv = [KEYS["agent"].did if a == "DID" else a for a in argv]
    rc, out, err = cli(capsys, "grant", "revoke", *argv)
    assert rc == 2 and out == "", (out, err)
    lines = [line for line in err.splitlines() if not line.startswith(("usage:", " "))]
    assert len(lines) == 1 and lines[0].startswith("agentgate"), err
    assert "Traceback" not in err
    assert revocations(repo.store) == set()
    assert outcome(repo, KEYS["agent"], grant) == (Outcome.ALLOW, None)
    assert not Path("elsewhere").exists()


def test_the_token_form_still_works_with_store_and_json(
    repo: GrantRepository, url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTGATE_STORE", "unused.db")
    grant = recorded(repo, issue(KEYS["root"], KEYS["agent"].public, CAP, ttl=600))
    child = recorded(repo, delegate(grant, KEYS["agent"], KEYS["other"].public, CAP, ttl=60))
    rc, out, err = cli(capsys, "grant", "revoke", grant.id, "--store", url, "--json")
    assert (rc, err) == (0, "")
    assert json.loads(out) == {
        "revoked": [grant.id],
        "already_revoked": [],
        "descendants": [child.id],
        "recorded": True,
    }
    assert revocations(repo.store) == {grant.id}
    assert not Path("unused.db").exists()


def test_a_failing_audit_append_leaves_no_grant_revoked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "ag.db"))
    assert cli(capsys, "store", "init")[0] == 0  # the log and its tables
    assert cli(capsys, "audit", "checkpoint")[0] == 0  # and its key
    store = SQLiteStore(tmp_path / "ag.db")
    repo = GrantRepository(store)
    try:
        grants = [recorded(repo, issue(KEYS["root"], KEYS["agent"].public, CAP, ttl=600)) for _ in range(3)]
        with store.transaction() as tx:  # the log refuses any entry once a revocation exists
            tx.execute(
                "CREATE TRIGGER r45_fault BEFORE INSERT ON audit_log "
                "WHEN (SELECT count(*) FROM agentgate_revocations) > 0 "
                "BEGIN SELECT RAISE(ABORT, 'r45 planted fault'); END"
            )
        rc, out, err = cli(capsys, "grant", "revoke", "--holder", KEYS["agent"].did)
        # One line of error, after the warning that names the planted trigger (review R59).
        warning, error = err.splitlines()
        assert warning.startswith(
            "agentgate: warning: the trigger r45_fault on table audit_log is not one agentgate made"
        )
        assert rc == 2 and out == "" and "r45 planted fault" in error, err
        assert revocations(store) == set()
        assert [outcome(repo, KEYS["agent"], g) for g in grants] == [(Outcome.ALLOW, None)] * 3
    finally:
        repo.close()
        store.close()


def test_a_grant_recorded_while_it_runs_is_either_revoked_and_audited_or_neither(
    repo: GrantRepository, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """One thread records grants to the holder, one at a time, while the command runs. "Recorded"
    is committed: the command revokes those committed before it read them, so the revoked ones
    are a prefix of the recording order, and each one revoked has its audit entry."""
    order: list[str] = []
    started, stop = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def recorder() -> None:
        store = open_store(url)
        grants = GrantRepository(store)
        try:
            after = 0
            while after < 3 and len(order) < 5000:  # and 3 more once the command is done
                after += stop.is_set()
                chain = issue(KEYS["root"], KEYS["agent"].public, CAP, ttl=600)
                record(grants, chain)
                order.append(chain.id)
                if len(order) == 5:
                    started.set()
        except BaseException as exc:  # reported below
            failures.append(exc)
            started.set()
        finally:
            grants.close()
            store.close()

    thread = threading.Thread(target=recorder)
    thread.start()
    try:
        assert started.wait(30)
        rc, out, err = cli(capsys, "grant", "revoke", "--holder", KEYS["agent"].did, "--json")
    finally:
        stop.set()
        thread.join(60)
    assert not failures, failures
    assert (rc, err) == (0, ""), err
    revoked = json.loads(out)["revoked"]
    in_store = revocations(repo.store)
    assert set(revoked) == in_store
    assert 5 <= len(in_store) <= len(order) - 3  # some recorded before it, some after
    assert in_store == set(order[: len(in_store)])  # a prefix: no grant recorded earlier left out
    assert sorted(e["chain_hash"] for e in revoke_entries(capsys)) == sorted(in_store)  # type: ignore[type-var]


# --- PostgreSQL's application role ---------------------------------------------------------------


@pytest.mark.postgres
def test_the_documented_application_role_revokes_by_holder(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentgate.store._postgres import PostgresStore

    monkeypatch.chdir(tmp_path)
    for name in ("AGENTGATE_LOG_KEY", "AGENTGATE_LOG_PREVIOUS_KEYS", "AGENTGATE_LOG_ORIGIN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AGENTGATE_STORE", postgres_url)
    assert cli(capsys, "store", "init")[0] == 0
    assert cli(capsys, "audit", "checkpoint")[0] == 0
    role = f"r45app_{threading.get_ident() % 100000}_{tmp_path.name[-6:].lower().replace('-', '_')}"
    page = OPERATIONS.read_text()
    start = page.index("```sql", page.index("grant the application role")) + len("```sql")
    block = page[start : page.index("```", start)]
    with PostgresStore(postgres_url) as owner, owner.transaction() as tx:
        tx.execute(f"CREATE ROLE {role} LOGIN")
        for statement in (s.strip() for s in block.split(";")):
            if statement:
                tx.execute(statement.replace("agentgate_app", role))
    user = re.match(r"postgresql://([^@]*)@", postgres_url)
    assert user is not None
    app_url = postgres_url.replace(f"postgresql://{user.group(1)}@", f"postgresql://{role}@", 1)
    monkeypatch.setenv("AGENTGATE_STORE", app_url)
    with PostgresStore(app_url) as app:
        grants = GrantRepository(app)
        held = [recorded(grants, issue(KEYS["root"], KEYS["agent"].public, CAP, ttl=600)) for _ in range(2)]
        rc, out, err = cli(capsys, "grant", "revoke", "--holder", KEYS["agent"].did, "--json")
        assert (rc, err) == (0, ""), err
        assert json.loads(out)["revoked"] == sorted(g.id for g in held)
        assert [outcome(grants, KEYS["agent"], g) for g in held] == [(Outcome.DENY, "revoked")] * 2
        grants.close()
    assert cli(capsys, "audit", "verify")[0] == 0


# --- the Python API --------------------------------------------------------------------------------


def test_the_python_api_refuses_bad_input_and_follows_a_bound_transaction(repo: GrantRepository) -> None:
    grant = recorded(repo, issue(KEYS["root"], KEYS["agent"].public, CAP, ttl=600))
    with pytest.raises(KeyFileError):
        revoke_holder(repo, "did:key:zNOTAKEY")
    with pytest.raises(InputError, match="holder must be"):
        revoke_holder(repo, 42)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="reason must be text"):
        revoke_holder(repo, KEYS["agent"].did, reason=b"x")  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="roll back"), repo.store.transaction() as tx, repo.within(tx):
        assert revoke_holder(repo, KEYS["agent"].public).revoked == (grant.id,)
        raise RuntimeError("roll back")
    assert revocations(repo.store) == set()
    authority = Authority(repo, KEYS["root"].public)
    done = authority.revoke_holder(KEYS["agent"].did, reason="nul \x00 and \udcff")
    assert (done.holder, done.revoked, done.already) == (KEYS["agent"].did, (grant.id,), ())
    again = authority.revoke_holder(KEYS["agent"].public)
    assert (again.revoked, again.already) == ((), (grant.id,))
    assert [str(r[0]) for r in repo.store.query("SELECT reason FROM agentgate_revocations")] == [
        "nul \\x00 and \\udcff"
    ]
