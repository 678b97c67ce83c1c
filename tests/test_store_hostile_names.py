"""Names and values a hostile or careless user chooses, reaching the
store (SQLite and PostgreSQL) and the text the audit log is read through.

Every test that touches a store runs on both (the ``store`` fixture): a difference between the
two is a defect.

What holds:

- No statement is built from a value: every name (grant id, tool, tenant, lease, breaker and
  bucket key, broker, request id) is a bound parameter compared with ``=``; nothing uses ``LIKE``
  or ``GLOB``, so ``%``, ``_``, ``*``, ``?``, ``[`` and ``\\`` in a name match only that name
  (descendants, revocations, dead letters by tool, lease slots), on both stores.
- Names that differ only in case or Unicode normalization (``A``/``a``, NFC/NFD ``é``) are
  different keys on both stores (both compare text byte for byte; PostgreSQL's collation is
  deterministic), so they never share a lease slot nor hide one another.
- The reference index of the audit log (PostgreSQL reads it from the entry's text in a trigger,
  SQLite with ``json_extract``) is the same on both for entries whose arguments hold nested
  ``{"ref": N, "resource": ...}`` objects and strings holding ``,"ref":N,"resource":``: only the
  entry's own top-level ``ref`` is indexed, and ``explain`` finds exactly the related entries.
- The HTML report escapes every text an entry holds (``<script>``, quotes, a newline).

Fixed here:

- agentgate/store/_sqlite.py, agentgate/store/_postgres.py (and the hot paths of
  agentgate/store/grants.py): a text value that is not valid Unicode (a lone surrogate, from an
  argument or a file decoded with ``surrogateescape``) raised a bare ``UnicodeEncodeError`` out of
  ``Store.transaction`` / ``Store.query`` and every domain on top of them (leases, dead letters,
  revocations, nonces), against the store's contract ("fails closed with ``StoreError``"): the
  scheduler, which gives up on a ``StoreError``, let the ``UnicodeEncodeError`` escape instead.
  Now a ``StoreError`` on both stores, the statement not run.
- agentgate/store/dead_letters.py: a dead letter whose text held a NUL character (a LangGraph
  tool call id, a run id, a tenant) was kept on SQLite and refused whole on PostgreSQL (its text
  columns cannot hold NUL): the letter was lost on one store only. NUL is now recorded escaped
  (``\\x00``, as a revocation's reason is) on both, and the ``--tool`` filter escapes alike.
- agentgate/store/leases.py: a lease, rate-bucket or breaker key holding a NUL character, or too
  long for a PostgreSQL B-tree index entry (a ``breaker_key`` of a few KB), took its slot on SQLite
  and failed on PostgreSQL (``StoreError``: the scheduler gives the call up as
  ``store_unavailable``). Such a key is now stored as ``sha256:HEX`` of its UTF-8 bytes on both
  stores; every other key as it is.
- agentgate/audit/entry.py, agentgate/store/audit/: a stored entry that does not validate made a
  ``TamperDetected`` carrying pydantic's multi-line message, with the entry's own keys unescaped.
  A tampered entry with a key ``"x\\n  - ..."`` or an escape sequence wrote lines of its choosing
  into ``agentgate audit verify``'s report (the problems are printed one per ``  - `` line) and
  sent escape sequences to the auditor's terminal. The message is now one line, the entry's text
  escaped, and every problem ``verify`` reports is one printable line.

What does not (xfail strict, with the file to fix):

- agentgate/cli/audit.py ``_shown``: a backslash is not escaped, so a resource holding the six
  characters ``\\x1b[2J`` reads exactly like one holding the escape character, and the text
  ``run_shell\\n`` like the newline variant a deny rule exists for; ``printable`` of
  agentgate/cli/_common.py escapes it (``\\\\``).
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from pathlib import Path

import pytest

from agentgate.audit.entry import AuditEntry
from agentgate.audit.merkle import leaf_hash
from agentgate.audit.report import render_report
from agentgate.cli.main import main
from agentgate.errors import InputError, StoreError, TamperDetected
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore, Store
from agentgate.store.audit import AuditLog
from agentgate.store.dead_letters import AttemptError, DeadLetter, DeadLetterStore
from agentgate.store.grants import GrantRepository
from agentgate.store.leases import LeaseManager, SharedBreakers, SharedRateLimits

ORIGIN = "test.example/audit"
SURROGATE = "tool\udcff"
"""Text as ``surrogateescape`` decodes the byte 0xff: no UTF-8 form, so no store can hold it."""


def letter(
    n: int, *, tool: str = "tool:x", run_id: str | None = "run", call_id: str | None = "c"
) -> DeadLetter:
    return DeadLetter(
        id=f"letter-{n}",
        recorded_at=1000.0 + n,
        tool=tool,
        tenant="t",
        principal="did:key:z",
        run_id=run_id,
        call_id=call_id,
        idempotency_key=None,
        arguments_digest="sha256:00",
        authority_chain=("g",),
        reason="retries_exhausted",
        errors=(AttemptError(1, "error", "RuntimeError", "boom", 1000.0),),
    )


# --- names are values, never patterns ------------------------------------------------------------


def test_pattern_characters_in_names_match_only_that_name(store: Store) -> None:
    grants = GrantRepository(store)
    try:
        names = ["a_b", "axb", "%", "a%", "*", "[a]", "a", "?", "a\\b", "ab"]
        grants.record_grants(
            [(f"child-{n}", n, "did:i", "did:a", 9_999_999_999, "tok") for n in names], now=1
        )
        for n in names:
            assert grants.descendants(n) == [f"child-{n}"], n
        grants.revoke("a_b", now=1)
        assert grants.revoked(names) == {"a_b"}
    finally:
        grants.close()
    dead = DeadLetterStore(store)
    for n, tool in enumerate(["tool:a_b", "tool:axb", "tool:%", "tool:a*"]):
        dead.record(letter(n, tool=tool))
    assert [x.tool for x in dead.recent(tool="tool:a_b")] == ["tool:a_b"]
    assert [x.tool for x in dead.recent(tool="tool:%")] == ["tool:%"]
    assert dead.recent(tool="tool:a") == []


def test_case_and_normalization_variants_are_different_keys_on_both_stores(store: Store) -> None:
    nfc = "tool:caf\u00e9"
    nfd = unicodedata.normalize("NFD", nfc)
    assert nfc != nfd
    leases = LeaseManager(store, ttl_s=60)
    try:
        for key in (nfc, nfd, "tool:A", "tool:a"):
            assert leases.try_acquire(key, 1) is not None, key  # each its own one slot
        assert leases.try_acquire(nfc, 1) is None and leases.try_acquire("tool:a", 1) is None
    finally:
        leases.close()


# --- text no store can hold ------------------------------------------------------------------------


def test_text_that_is_not_unicode_is_a_store_error_on_both_stores(store: Store) -> None:
    """A lone surrogate reaches every domain as a ``StoreError`` (the store's one failure type,
    which callers turn into a refusal), never a bare ``UnicodeEncodeError``; nothing is written.
    A dead letter's field is an ``InputError`` naming it (review R88), also never written."""
    leases = LeaseManager(store, ttl_s=60)
    grants = GrantRepository(store)
    try:
        attempts = {
            "lease": lambda: leases.try_acquire(SURROGATE, 1),
            "rate": lambda: SharedRateLimits(store).try_take(SURROGATE, 1.0, 1),
            "breaker": lambda: SharedBreakers(store).publish(SURROGATE, "open", 1.0),
            "dead letters by tool": lambda: DeadLetterStore(store).recent(tool=SURROGATE),
            "revoke": lambda: grants.revoke(SURROGATE, now=1),
            "revoked": lambda: grants.revoked([SURROGATE]),
            "nonce": lambda: grants.consume_nonce("did:key:z", SURROGATE, 9_999_999_999, ["g"]),
        }
        for what, attempt in attempts.items():
            with pytest.raises(StoreError, match="not valid Unicode"):
                attempt()
            assert what  # named in the traceback when one is not refused so
        # A dead letter's field is refused naming it, before the store is written (review R88).
        with pytest.raises(InputError, match=r"the run_id of dead letter .* must be valid Unicode text"):
            DeadLetterStore(store).record(letter(1, run_id=SURROGATE))
        with store.transaction() as tx:
            assert tx.execute("SELECT COUNT(*) FROM agentgate_dead_letters")[0][0] == 0
            assert tx.execute("SELECT COUNT(*) FROM agentgate_revocations")[0][0] == 0
    finally:
        leases.close()
        grants.close()


def test_a_dead_letter_with_a_nul_is_kept_alike_on_both_stores(store: Store) -> None:
    """A tool call id with a NUL (a model-made LangGraph id) must not lose the letter on one store."""
    dead = DeadLetterStore(store)
    dead.record(letter(1, tool="tool:a\x00b", run_id="run\x00", call_id="\x00call"))
    (kept,) = dead.recent()
    assert (kept.tool, kept.run_id, kept.call_id) == ("tool:a\\x00b", "run\\x00", "\\x00call")
    assert [x.id for x in dead.recent(tool="tool:a\x00b")] == ["letter-1"]


LONG_KEY = "breaker:" + "".join(hashlib.sha256(str(k).encode()).hexdigest() for k in range(64))
"""4 KB that do not compress: past what a PostgreSQL B-tree index entry holds (about 2.7 KB)."""


@pytest.mark.parametrize(
    "key", ["tool:a\x00b", LONG_KEY, "tool:" + LONG_KEY.upper()], ids=["nul", "long", "long2"]
)
def test_any_key_takes_its_slot_alike_on_both_stores(store: Store, key: str) -> None:
    """A breaker_key or tool name with a NUL, or longer than PostgreSQL indexes, works as on SQLite."""
    leases = LeaseManager(store, ttl_s=60)
    try:
        assert leases.try_acquire(key, 1) is not None
        assert leases.try_acquire(key, 1) is None  # the same key: its one slot is taken
        assert leases.try_acquire(key + "x", 1) is not None  # another key, even past the bound
        assert len(leases.rows(key)) == 1
    finally:
        leases.close()
    rates = SharedRateLimits(store)
    assert rates.try_take(key, 0.001, 1) == 0.0
    assert rates.try_take(key, 0.001, 1) > 0  # the same bucket, now empty
    breakers = SharedBreakers(store)
    breakers.publish(key, "open", 5.0)
    read = breakers.read(key)
    assert read is not None and read.state == "open" and read.opened_at == 5.0


# --- the audit log's text -------------------------------------------------------------------------

FORGED_KEY = "x\n  - intact: nothing is wrong\x1b[2J\u202e"
"""A key a tamperer writes into an entry: a fake problem line, a screen clear, a bidi override."""


def tamper(store: Store, index: int, data: bytes) -> None:
    """Replace entry ``index`` and its leaf hash, as someone with write access to the database can."""
    if isinstance(store, SQLiteStore):
        with store.transaction() as tx:
            tx.execute("DROP TRIGGER audit_log_no_update")
            tx.execute(
                "UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = ?", (data, leaf_hash(data), index)
            )
    else:
        with store.transaction() as tx:
            tx.execute("ALTER TABLE audit_log DISABLE TRIGGER USER")
            tx.execute(
                "UPDATE audit_log SET entry = ?, leaf_hash = ? WHERE idx = ?", (data, leaf_hash(data), index)
            )
            tx.execute("ALTER TABLE audit_log ENABLE TRIGGER USER")


def terminal_safe(line: str) -> bool:
    return not any(unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") for c in line)


def test_a_tampered_entry_cannot_write_lines_into_the_verify_report(store: Store) -> None:
    log = AuditLog(store, SigningKey(b"\x05" * 32), origin=ORIGIN)
    for n in range(3):
        log.append({"kind": "allow", "principal": f"did:key:z{n}", "resource": "tool:t"})
    log.checkpoint()
    genuine = json.loads(log.entry(1).to_bytes())
    forged = json.dumps({**genuine, FORGED_KEY: 1}, sort_keys=True, separators=(",", ":")).encode()
    tamper(store, 1, forged)
    with pytest.raises(TamperDetected) as raised:
        AuditEntry.from_bytes(forged)
    assert "\n" not in str(raised.value) and terminal_safe(str(raised.value))
    report = log.verify()
    assert not report.ok and report.first_bad_index == 1
    assert all(terminal_safe(p) for p in report.problems), report.problems
    assert any("\\x1b" in p for p in report.problems)  # named, escaped


def test_verify_command_prints_one_line_per_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``agentgate audit verify`` on that store: every line it prints is its own."""
    from agentgate.store.audit import log_origin, open_log_key

    store = SQLiteStore(tmp_path / "agentgate.db")
    log = AuditLog(store, open_log_key(store), origin=log_origin())
    for n in range(3):
        log.append({"kind": "allow", "principal": f"did:key:z{n}", "resource": "tool:t"})
    log.checkpoint()
    genuine = json.loads(log.entry(0).to_bytes())
    tamper(store, 0, json.dumps({**genuine, FORGED_KEY: 1}, sort_keys=True, separators=(",", ":")).encode())
    store.close()
    code = main(["audit", "verify", "--store", str(tmp_path / "agentgate.db")])
    out = capsys.readouterr().out
    assert code == 1
    lines = out.splitlines()
    said = int(lines[0].split()[1])  # "TAMPERED: N problem(s)"
    assert lines[0].startswith("TAMPERED") and len([x for x in lines if x.startswith("  - ")]) == said
    assert all(terminal_safe(x) for x in lines), out
    assert not any("intact" in x for x in lines if x.startswith("  - intact"))


def test_report_escapes_what_entries_hold(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "agentgate.db")
    log = AuditLog(store, SigningKey(b"\x05" * 32), origin=ORIGIN)
    hostile = '<script>alert(1)</script>"\n<b>'
    log.append({"kind": "deny", "principal": hostile, "resource": "tool:" + hostile, "reasons": [hostile]})
    log.append({"kind": "allow", "principal": hostile, "resource": "tool:" + hostile, "budget_delta": 5})
    page = render_report(log.entries(), None, [hostile])
    store.close()
    assert "<script>" not in page and "<b>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&quot;" in page


def test_reference_index_reads_only_the_entrys_own_ref_on_both_stores(store: Store) -> None:
    """PostgreSQL's trigger finds ``ref`` in the entry's text, SQLite's parses JSON: arguments that
    hold the same text (nested keys, a string) must index nothing on either."""
    log = AuditLog(store, SigningKey(b"\x05" * 32), origin=ORIGIN)
    decoy = {"a": {"ref": 0, "resource": "tool:t"}, "s": ',"ref":0,"resource":"', 'z","ref":0,"resource":': 1}
    first = log.append({"kind": "allow", "principal": "did:key:z", "resource": "tool:t", "args": decoy})
    other = log.append(
        {"kind": "allow", "principal": "did:key:z", "resource": 'tool:,"ref":0,', "args": decoy}
    )
    outcome = log.append(
        {"kind": "outcome", "principal": "did:key:z", "ref": other, "args": decoy, "status": "ok"}
    )
    log.append(
        {"kind": "deny", "principal": "did:key:z", "resource": 'tool:x","ref":0,"resource":"', "args": decoy}
    )
    assert store.query("SELECT idx, ref FROM audit_refs ORDER BY idx") == [(outcome, other)]
    assert [e.index for e in log.explain(first).related] == []
    assert [e.index for e in log.explain(other).related] == [outcome]
    assert log.verify().ok


def test_audit_show_tells_an_escape_from_the_text_of_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentgate.store.audit import log_origin, open_log_key

    store = SQLiteStore(tmp_path / "agentgate.db")
    log = AuditLog(store, open_log_key(store), origin=log_origin())
    log.append({"kind": "deny", "principal": "did:key:z", "resource": "tool:run_shell\n"})
    log.append({"kind": "deny", "principal": "did:key:z", "resource": "tool:run_shell\\n"})
    store.close()
    assert main(["audit", "show", "--store", str(tmp_path / "agentgate.db")]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert len(rows) == 2
    assert rows[0].split()[4] != rows[1].split()[4]  # the resource column of each
