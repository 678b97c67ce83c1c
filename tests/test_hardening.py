"""Edge and hostile inputs an adversarial review found mishandled, one section per part.

Each test states the promise (from the docs) that the product broke before its fix: policies
that failed open, inputs that crashed with a traceback instead of a typed error, evidence that
could be lost. Real components only: SQLite files in tmp_path, real HTTP on 127.0.0.1.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from _raw_sqlite import opened

from agentgate.audit.entry import AuditEntry
from agentgate.capabilities import Call
from agentgate.cli.main import main
from agentgate.errors import Denied, InputError, PolicyError, StoreError, TamperDetected
from agentgate.findings import Outcome
from agentgate.gate import AgentIdentity, Gate
from agentgate.keys import SigningKey
from agentgate.policy import PolicyIndex, parse_policy
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog, open_log_key
from agentgate.store.audit._schema import accept_repair

BOT = "did:key:z6MkqQP5oTUxZ95rgbJg29FwyrJ5N8HrRPpEBQbPrAUCkPXm"
LEAD = "did:key:z6Mktk1iFd7YoyEirJoqYtcfNUtMa5nUhqkrQsgX9tmc5Npj"

# --- policy files ------------------------------------------------------------------------------

NORWAY = f"""version: 1
principals:
  bot: {{kind: agent, did: "{BOT}", roles: [payer]}}
  lead: {{kind: human, did: "{LEAD}"}}
tools:
  payments.transfer:
    args:
      country: {{type: string, required: true}}
roles:
  payer:
    kind: agent
    ttl_s: 600
    capabilities:
      - resource: tool:payments.transfer
approvals:
  nordic-review:
    resource: tool:payments.transfer
    when:
      country: {{in: [NO, SE, DK]}}
    approvers: [lead]
"""


def test_a_gate_on_country_no_holds_norway() -> None:
    """YAML 1.1 reads ``NO`` as False: the gate held [False, 'SE', 'DK'] and a transfer to Norway
    needed no approval (fail open). Read as YAML 1.2, ``NO`` is text."""
    index = PolicyIndex(parse_policy(NORWAY, source="norway.yaml"))
    for country in ("NO", "SE", "DK"):
        decision = index.evaluate("bot", Call.tool("payments.transfer", {"country": country}))
        assert decision.outcome is Outcome.APPROVAL_REQUIRED, (country, decision.reasons)
    assert index.evaluate("bot", Call.tool("payments.transfer", {"country": "FI"})).outcome is Outcome.ALLOW


def test_a_policy_with_an_integer_of_5000_digits_is_a_located_policy_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    text = "version: 1\nsettings:\n  max_ttl_s: " + "9" * 5000 + "\n"
    with pytest.raises(PolicyError) as caught:
        parse_policy(text, source="huge.yaml")
    assert caught.value.line == 3
    monkeypatch.setattr("agentgate.cli.main.GROUPS", ("agentgate.cli.policy",))
    path = tmp_path / "huge.yaml"
    path.write_text(text, encoding="utf-8")
    assert main(["policy", "lint", str(path)]) == 2
    assert "huge.yaml:3" in capsys.readouterr().err


def test_version_true_and_version_1_0_are_not_version_1() -> None:
    """No coercion: ``True == 1`` and ``1.0 == 1`` in Python, not in a policy file."""
    for value in ("true", "1.0"):
        with pytest.raises(PolicyError, match="unsupported or missing policy version"):
            parse_policy(f"version: {value}\n", source="v.yaml")


def test_policy_schema_to_a_file_that_cannot_be_written_exits_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("agentgate.cli.main.GROUPS", ("agentgate.cli.policy",))
    target = tmp_path / "missing" / "schema.json"
    assert main(["policy", "schema", "-o", str(target)]) == 2
    assert f"{target}: cannot write the schema" in capsys.readouterr().err


def test_policy_lint_survives_an_interval_no_number_lies_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No double lies strictly between 4.999999999999999 and 5; ``witness`` looked for one with
    a bare ``next`` and lint died with a traceback. Such a constraint covers nothing."""
    monkeypatch.setattr("agentgate.cli.main.GROUPS", ("agentgate.cli.policy",))
    path = tmp_path / "interval.yaml"
    path.write_text(
        f"""version: 1
principals:
  bot: {{kind: agent, did: "{BOT}", roles: [r]}}
tools:
  a.b:
    args:
      x: {{type: number}}
roles:
  r:
    kind: agent
    ttl_s: 60
    capabilities:
      - resource: tool:a.b
        constraints:
          x: {{le: 5, ge: 5}}
    delegation:
      max_depth: 1
      max_ttl_s: 30
      capabilities:
        - resource: tool:a.b
          constraints:
            x: {{gt: 4.999999999999999, lt: 5}}
""",
        encoding="utf-8",
    )
    assert main(["policy", "lint", str(path)]) in (0, 1)
    assert "interval.yaml" in capsys.readouterr().out


# --- policy evaluation -------------------------------------------------------------------------


def test_the_index_compares_integer_bounds_exactly_beyond_2_53() -> None:
    """The index turned bounds into floats: ``le: 9007199254740995`` became 9007199254740996.0 and
    the index (and ``policy explain``) allowed 9007199254740996."""
    policy = parse_policy(
        f"""
version: 1
principals:
  bot: {{kind: agent, did: "{BOT}", roles: [payer]}}
tools:
  pay:
    args:
      amount: {{type: integer, required: true}}
roles:
  payer:
    kind: agent
    capabilities:
      - resource: tool:pay
        constraints:
          amount: {{le: 9007199254740995}}
    ttl_s: 600
""",
        source="bound.yaml",
    )
    index = PolicyIndex(policy)
    assert index.evaluate("bot", Call.tool("pay", {"amount": 9007199254740995})).outcome is Outcome.ALLOW
    assert index.evaluate("bot", Call.tool("pay", {"amount": 9007199254740996})).outcome is Outcome.DENY


GATED_MODEL = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [writer]}}
  lead: {{kind: human, did: "{lead}"}}
models:
  big: {{cost_per_mtok: {{input: 0, output: 0}}}}
roles:
  writer:
    kind: agent
    capabilities:
      - resource: model:big
    ttl_s: 600
approvals:
  long-answers:
    resource: model:big
    when: {{max_tokens: {{gt: 4096}}, style: {{prefix: "formal"}}}}
    approvers: [lead]
"""


@pytest.fixture
def gated(tmp_path: Path) -> Iterator[tuple[Gate, AgentIdentity]]:
    keys = {n: SigningKey.generate() for n in ("root", "agent", "lead")}
    text = GATED_MODEL.format(**{n: k.did for n, k in keys.items()})
    gate = Gate(parse_policy(text, source="gated.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="writer")
    yield gate, agent
    gate.close()


def test_an_approval_gate_applies_to_a_value_its_condition_cannot_compare(
    gated: tuple[Gate, AgentIdentity],
) -> None:
    """Model arguments have no declared types. ``max_tokens: "100000"`` (text a lax backend reads
    as 100000) or ``[100000]`` skipped the gate that ``100000`` meets: now a value a condition
    cannot compare needs approval, as a missing one does (fail closed)."""
    gate, agent = gated
    assert gate.authorize(agent, Call.model("big", {"max_tokens": 100000, "style": "formal"})).needs_approval
    for value in ("100000", [100000], None, True):
        auth = gate.authorize(agent, Call.model("big", {"max_tokens": value, "style": "formal"}))
        assert auth.needs_approval, (value, auth.reasons)
    auth = gate.authorize(agent, Call.model("big", {"max_tokens": 100000, "style": 7}))
    assert auth.needs_approval, auth.reasons
    small = gate.authorize(agent, Call.model("big", {"max_tokens": 100, "style": "formal"}))
    assert small.allowed, small.reasons


# --- audit log ---------------------------------------------------------------------------------

ORIGIN = "hardening.example/audit"


def _log_with_checkpoint(db: Path, n: int = 5) -> tuple[SQLiteStore, AuditLog]:
    store = SQLiteStore(db)
    log = AuditLog(store, open_log_key(store), ORIGIN)
    for i in range(n):
        log.append({"kind": "deny", "principal": "did:key:zAlice", "budget_delta": i})
    log.checkpoint()
    return store, log


def _rewrite(db: Path, sql: str) -> None:
    raw = sqlite3.connect(db)
    raw.execute("DROP TRIGGER audit_log_no_update")
    raw.execute(sql)
    raw.commit()
    raw.close()


def test_verify_reports_an_entry_edited_with_replace_which_stores_text(tmp_path: Path) -> None:
    """The natural shell edit, ``replace()``, stores the entry as TEXT: verify raised TypeError
    (``b"\\x00" + str``) instead of naming the entry."""
    db = tmp_path / "agentgate.db"
    store, log = _log_with_checkpoint(db)
    _rewrite(db, "UPDATE audit_log SET entry = replace(entry, 'deny', 'allo') WHERE idx = 2")
    report = log.verify()
    store.close()
    assert not report.ok and report.first_bad_index == 2


def test_audit_verify_reads_an_entry_retyped_as_text_as_its_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A row retyped as TEXT made verify raise TypeError (a traceback from ``audit verify``).
    Entries are read as bytes whatever their column type: the same bytes are the same evidence
    (the entries verify); other bytes are an edited entry (exit 1).

    Changed on purpose in review R56: the retyping drops the trigger audit_log_no_update, which
    ``audit verify`` put back (and then said intact). It now reports the dropped trigger (exit 1)
    with the entries verifying, and a writer's opening puts the trigger back."""
    monkeypatch.setattr("agentgate.cli.main.GROUPS", ("agentgate.cli.audit",))
    db = tmp_path / "agentgate.db"
    monkeypatch.setenv("AGENTGATE_STORE", str(db))
    monkeypatch.delenv("AGENTGATE_LOG_KEY", raising=False)
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    store, _log = _log_with_checkpoint(db)
    store.close()
    _rewrite(db, "UPDATE audit_log SET entry = CAST(entry AS TEXT) WHERE idx = 1")
    assert main(["audit", "verify"]) == 1
    out = capsys.readouterr().out
    assert "the protection trigger audit_log_no_update on table audit_log is missing" in out
    assert "the entries verify: 5 entries" in out
    with SQLiteStore(db) as writing:
        AuditLog(writing, open_log_key(writing), ORIGIN)  # a writer's opening puts the trigger back
        # and records the repair, reported until accepted (review R57)
        accept_repair(writing, 1, "ops", "entry 1 checked against the copy kept outside")
    assert main(["audit", "verify"]) == 0
    capsys.readouterr()
    _rewrite(db, "UPDATE audit_log SET entry = replace(entry, 'deny', 'allo') WHERE idx = 1")
    assert main(["audit", "verify"]) == 1
    assert "entry 1: bytes do not match the stored leaf hash" in capsys.readouterr().out


def test_sqlite_checkpoints_cannot_be_overwritten_with_insert_or_replace(tmp_path: Path) -> None:
    """``INSERT OR REPLACE`` on an existing id deletes the old row without firing the delete
    trigger: a signed checkpoint could be swapped for a copy of an older one, no trigger dropped."""
    store = SQLiteStore(tmp_path / "agentgate.db")
    log = AuditLog(store, SigningKey(b"\x07" * 32), ORIGIN)
    for i in range(6):
        log.append({"kind": "deny", "principal": "did:key:zAlice", "budget_delta": i})
        if i == 2:
            log.checkpoint()
    log.checkpoint()
    before = log.checkpoints()
    with pytest.raises(StoreError, match="append-only"), store.transaction() as tx:
        tx.execute(
            "INSERT OR REPLACE INTO audit_checkpoints (id, size, root, note, created) "
            "SELECT 2, size, root, note, created FROM audit_checkpoints WHERE id = 1"
        )
    assert log.checkpoints() == before
    store.close()


def test_a_new_checkpoint_builds_on_the_signed_note_not_on_the_rows_columns(tmp_path: Path) -> None:
    """The newest checkpoint row's size and root columns are not signed: a row whose columns
    disagree with its note (a copied older note under a larger size) is refused, not built on."""
    db = tmp_path / "agentgate.db"
    store, log = _log_with_checkpoint(db, n=3)
    log.append({"kind": "deny", "principal": "did:key:zAlice", "budget_delta": 9})
    raw = sqlite3.connect(db)
    raw.execute(
        "INSERT INTO audit_checkpoints (size, root, note, created) "
        "SELECT 4, root, note, created FROM audit_checkpoints WHERE size = 3"
    )
    raw.commit()
    raw.close()
    with pytest.raises(TamperDetected, match="does not match its signed note"):
        log.checkpoint()
    store.close()


# --- budgets and single use ---------------------------------------------------------------------

PRICED = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [worker]}}
models:
  small: {{cost_per_mtok: {{input: 1000000, output: 2000000}}}}
roles:
  worker:
    kind: agent
    capabilities:
      - resource: model:small
    budget: {{limit: 10000, unit: usd_micros}}
    ttl_s: 600
"""


@pytest.fixture
def priced(tmp_path: Path) -> Iterator[tuple[Gate, AgentIdentity]]:
    keys = {n: SigningKey.generate() for n in ("root", "agent")}
    text = PRICED.format(**{n: k.did for n, k in keys.items()})
    gate = Gate(parse_policy(text, source="priced.yaml"), SQLiteStore(tmp_path / "agentgate.db"))
    agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="worker")
    yield gate, agent
    gate.close()


def _outcome(gate: Gate, auth_index: int | None) -> AuditEntry:
    gate.flush()
    [outcome] = [e for e in gate.audit.entries() if e.kind == "outcome" and e.ref == auth_index]
    return outcome


def test_token_counts_that_are_not_two_non_negative_integers_are_refused(
    priced: tuple[Gate, AgentIdentity],
) -> None:
    """A negative prompt estimate made the cost negative, the reservation was skipped and the call
    allowed for free (fail open). Such counts are a caller's bug: InputError, nothing recorded."""
    gate, agent = priced
    before = len(list(gate.audit.entries()))
    for tokens in ((-(10**9), 10**6), (1.5, 10), (True, 10), (10,), "10,10"):
        with pytest.raises(InputError, match="token counts"):
            gate.authorize(agent, Call.model("small"), tokens=tokens)  # type: ignore[arg-type]
    assert len(list(gate.audit.entries())) == before


def test_a_cost_no_budget_can_hold_is_a_recorded_refusal(priced: tuple[Gate, AgentIdentity]) -> None:
    """``tokens=(10**30, 1)`` raised sqlite3's OverflowError out of ``authorize``. Refused as a
    call no budget can ever hold, not as a spent budget (review R82)."""
    gate, agent = priced
    auth = gate.authorize(agent, Call.model("small"), tokens=(10**30, 1))
    assert not auth.allowed and auth.budget_never_fits and auth.audit_index is not None


def test_an_overrun_that_does_not_fit_is_recorded_and_exhausts_the_budget(
    priced: tuple[Gate, AgentIdentity],
) -> None:
    """Reserved 30 micro-dollars, used 20,010 with 9,970 left: the ledger refused the overrun, the
    outcome was rolled back and only logged: no outcome entry, nothing charged, the reservation
    open for ever. Now the call's outcome is recorded with the overrun, the budget is spent out."""
    gate, agent = priced
    auth = gate.authorize(agent, Call.model("small"), tokens=(10, 10))
    assert auth.allowed
    # A prompt far longer than estimated (output is never charged over the max reserved).
    gate.run(auth, lambda: "answer", spent=lambda _result: (19_990, 10))
    outcome = _outcome(gate, auth.audit_index)
    assert outcome.status == "ok"
    assert any("overran the usd_micros budget by 10010" in r for r in outcome.reasons), outcome.reasons
    assert gate.ledger.spent(agent.chain.root.id) == 10_000
    assert gate.ledger.remaining(agent.chain.root.id) == 0
    assert not gate.authorize(agent, Call.model("small"), tokens=(1, 1)).allowed


def test_usage_a_backend_reports_that_is_garbage_is_charged_as_reserved(
    priced: tuple[Gate, AgentIdentity],
) -> None:
    """A negative usage would have refunded more than was reserved."""
    gate, agent = priced
    auth = gate.authorize(agent, Call.model("small"), tokens=(10, 10))
    gate.run(auth, lambda: "answer", spent=lambda _result: (-(10**6), 5))
    outcome = _outcome(gate, auth.audit_index)
    assert outcome.budget_delta == 30 and any("not two token counts" in r for r in outcome.reasons)
    assert gate.ledger.spent(agent.chain.root.id) == 30


def test_allow_and_outcome_entries_carry_the_amounts_in_the_callers_unit(
    priced: tuple[Gate, AgentIdentity],
) -> None:
    """The allow entry said 0 whatever it reserved; the outcome summed every unit (calls, tokens
    and money) into one number."""
    gate, agent = priced
    auth = gate.authorize(agent, Call.model("small"), tokens=(10, 10))  # 10 + 20 micro-dollars
    assert [unit for _id, unit, _amount in auth.reservations] == ["usd_micros"]
    gate.run(auth, lambda: "answer", spent=lambda _result: (4, 3))  # 4 + 6
    assert gate.audit.entry(auth.audit_index or 0).budget_delta == 30
    assert _outcome(gate, auth.audit_index).budget_delta == 10


def test_one_allow_runs_its_call_once(priced: tuple[Gate, AgentIdentity]) -> None:
    """``Gate.run`` accepted the same allow again and again: extra runs had no decision, no
    charge and no outcome entry."""
    gate, agent = priced
    auth = gate.authorize(agent, Call.model("small"), tokens=(10, 10))
    ran: list[int] = []
    gate.run(auth, lambda: ran.append(1), spent=lambda _result: (10, 10))
    with pytest.raises(Denied, match="already used"):
        gate.run(auth, lambda: ran.append(1), spent=lambda _result: (10, 10))
    assert ran == [1]


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("tools:\n  a:\n    timeout_s: .inf\n", "tools.a.timeout_s: Input should be a finite number"),
        ("tools:\n  a:\n    rate: {per_second: .nan, burst: 1}\n", "tools.a.rate.per_second"),
        ("roles:\n  r:\n    ttl_s: 0x10000000000000000000000000000000000000000\n", "roles.r.ttl_s"),
        ("settings:\n  max_ttl_s: 315360001\n", "settings.max_ttl_s"),
        ("roles:\n  r:\n    budget: {limit: 9223372036854775808}\n", "roles.r.budget.limit"),
        ("roles:\n  r:\n    delegation: {max_depth: 16}\n", "roles.r.delegation.max_depth"),
    ],
)
def test_policy_numbers_a_grant_or_a_timer_cannot_hold_are_refused_at_load(text: str, where: str) -> None:
    """An infinite timeout or rate loaded and ran; a ttl of 2**160 s, a budget above 2**63 - 1 or a
    depth of 16 loaded and linted clean, then failed at issue time with a confusing token error."""
    with pytest.raises(PolicyError, match=where.replace(".", r"\.")):
        parse_policy("version: 1\n" + text, source="p.yaml")


# --- the store -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url", ["postgresql+psycopg://agentgate@127.0.0.1:1/db", "mysql://x/y", "sqlite://rel.db"]
)
def test_a_store_url_with_an_unknown_scheme_is_refused_not_taken_as_a_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], url: str
) -> None:
    """Taken as a path, ``postgresql+psycopg://...`` became a local file: ``grant revoke``
    printed "revoked" (exit 0) while the shared store the operator named never heard of it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENTGATE_STORE", url)
    assert main(["grant", "revoke", "ab" * 32]) == 2
    assert "unsupported store URL" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_store_url_schemes_are_case_insensitive_and_sqlite_urls_keep_their_slashes(tmp_path: Path) -> None:
    from agentgate.store import open_store

    with pytest.raises(StoreError, match="not a valid PostgreSQL URL"):  # PostgreSQL, not a file
        open_store("POSTGRESQL://%%%")
    absolute = open_store(f"SQLite:///{tmp_path}/abs.db")  # four slashes: an absolute path
    try:
        assert absolute.url == str(tmp_path / "abs.db")
    finally:
        absolute.close()


def test_a_malformed_postgresql_url_fails_at_once_without_repeating_its_password() -> None:
    """It waited for the pool's 10 s and then said 'pool initialization incomplete'."""
    from agentgate.store import open_store

    with pytest.raises(StoreError) as caught:
        open_store("postgresql://user:s3cret%zz@127.0.0.1/db")
    assert "not a valid PostgreSQL URL" in str(caught.value) and "s3cret" not in str(caught.value)


def test_a_statement_error_that_leaves_a_transaction_is_a_store_error(tmp_path: Path) -> None:
    """Only BEGIN and COMMIT were mapped: a failing statement raised a bare sqlite3.Error past
    every ``except StoreError`` (``grant revoke`` on a damaged store printed a traceback)."""
    store = SQLiteStore(tmp_path / "s.db")
    try:
        with pytest.raises(StoreError, match="no such table"), store.transaction() as tx:
            tx.execute("INSERT INTO no_such_table VALUES (1)")
        with store.transaction() as tx:  # caught inside the block, the transaction goes on
            with pytest.raises(sqlite3.OperationalError):
                tx.execute("INSERT INTO no_such_table VALUES (1)")
            assert tx.execute("SELECT 1") == [(1,)]
    finally:
        store.close()


def test_revoke_on_a_damaged_sqlite_store_is_one_line_and_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentgate.authority import GrantRepository, revoke

    db = tmp_path / "store.db"
    store = SQLiteStore(db)
    revoke(GrantRepository(store), "ab" * 32)
    store.close()
    with opened(db) as raw:
        raw.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        root = raw.execute(
            "SELECT rootpage FROM sqlite_master WHERE name = 'agentgate_revocations'"
        ).fetchone()[0]
        size = raw.execute("PRAGMA page_size").fetchone()[0]
    with db.open("r+b") as handle:
        handle.seek((root - 1) * size)
        handle.write(b"\xff" * size * 2)
    monkeypatch.setenv("AGENTGATE_STORE", str(db))
    assert main(["grant", "revoke", "cd" * 32]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("agentgate: error:")


# --- LangGraph middleware -----------------------------------------------------------------------


def test_usage_metadata_that_is_not_token_counts_is_read_as_no_usage() -> None:
    """The middleware ran ``int()`` on whatever a model's ``usage_metadata`` held: a negative
    count would have refunded, a bad one raised out of the agent's run. Now anything but
    non-negative integers reads as no usage, and the call is charged what it reserved."""
    from langchain_core.messages import AIMessage

    from agentgate.integrations.langgraph._calls import _tokens_used

    def answer(i: int, o: int) -> AIMessage:
        return AIMessage(
            content="", usage_metadata={"input_tokens": i, "output_tokens": o, "total_tokens": i + o}
        )

    assert _tokens_used(answer(7, 3)) == (7, 3)
    assert _tokens_used(answer(-5, 3)) is None
    assert _tokens_used(AIMessage(content="")) is None
