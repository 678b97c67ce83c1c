"""The audit log read against docs/audit-format.md by a verifier written from the doc.

Each test failed on the code before its fix; its docstring says what was wrong.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_audit_cli import audit_cli_store

from agentgate.audit.entry import AuditEntry, encode_entry
from agentgate.audit.note import Checkpoint, verifier_key
from agentgate.cli.main import main
from agentgate.errors import InputError, TamperDetected
from agentgate.gate import Gate
from agentgate.keys import SigningKey
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore, Store
from agentgate.store.audit import AuditLog, open_log_key

KEY = SigningKey(b"\x0d" * 32)
ORIGIN = "r35.example/audit"
TIME = "2026-11-29T10:15:00.000000Z"
DOC = Path(__file__).resolve().parent.parent / "docs" / "audit-format.md"
POLICY = """
version: 1
trust_anchors:
  root: {{did: "{root}"}}
principals:
  agent: {{kind: agent, did: "{agent}", roles: [chat]}}
roles:
  chat:
    kind: agent
    capabilities:
      - resource: tool:search
    ttl_s: 3600
"""
FIELDS = {"index": 0, "time": TIME, "kind": "allow", "principal": "did:key:zAlice"}
NOT_ENTRY_TIMES = [
    pytest.param(TIME + "\n", id="trailing-newline"),
    pytest.param("２０２６-11-29T10:15:00.000000Z", id="fullwidth-digits"),
    pytest.param("2026-11-29T10:15:00.00000٠Z", id="arabic-indic-digit"),
]


@pytest.mark.parametrize("time", NOT_ENTRY_TIMES)
def test_an_entry_time_is_exactly_the_documented_format(time: str) -> None:
    """The time pattern ended in ``$`` (which also matches before a final newline) and used
    ``\\d`` (any script's digits): entries whose ``time`` is not exactly
    ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` were written and read back as valid, so a reader built from
    the doc refused a log that ``audit verify`` called intact."""
    with pytest.raises(InputError, match="time"):
        encode_entry({**FIELDS, "time": time})
    with pytest.raises(InputError, match="time"):
        AuditEntry.build(**{**FIELDS, "time": time})
    forged = encode_entry(FIELDS).replace(b'"time":"' + TIME.encode(), b'"time":"' + time.encode())
    forged = forged.replace(b"\n", b"\\n")  # as the JSON encoder writes a newline in a string
    with pytest.raises(TamperDetected):
        AuditEntry.from_bytes(forged)


@pytest.mark.parametrize("time", NOT_ENTRY_TIMES)
def test_the_log_writes_no_entry_with_a_time_outside_the_format(store: Store, time: str) -> None:
    log = AuditLog(store, KEY, ORIGIN)
    with pytest.raises(InputError, match="time"):
        log.append({"kind": "deny", "principal": "did:key:zAlice", "time": time})
    assert log.size() == 0


def test_entry_times_in_the_format_still_read_back() -> None:
    entry = AuditEntry.from_bytes(encode_entry(FIELDS))
    assert entry.time == TIME


NO_SUCH_TIMES = [
    pytest.param("2026-13-01T00:00:00.000000Z", id="month-13"),
    pytest.param("2026-00-10T00:00:00.000000Z", id="month-0"),
    pytest.param("2026-01-32T00:00:00.000000Z", id="day-32"),
    pytest.param("2026-02-29T00:00:00.000000Z", id="february-29-of-a-common-year"),
    pytest.param("2026-11-29T25:00:00.000000Z", id="hour-25"),
    pytest.param("2026-11-29T10:60:00.000000Z", id="minute-60"),
    pytest.param("2026-11-29T10:15:60.000000Z", id="second-60"),
    pytest.param("0000-01-01T00:00:00.000000Z", id="year-0"),
]


@pytest.mark.parametrize("time", NO_SUCH_TIMES)
def test_an_entry_time_that_names_no_moment_is_refused_when_written(store: Store, time: str) -> None:
    """Kills: ``time`` was checked by pattern only, so an API caller's month 13, day 32 or hour
    25 was written into the log (on the fast path and through the model alike), and every reader
    that parses times (``audit show --since``, a verifier from the doc) met a date that is none.
    Rule: ``InputError`` naming ``time`` when an entry is made; nothing written."""
    with pytest.raises(InputError, match="time"):
        encode_entry({**FIELDS, "time": time})
    with pytest.raises(InputError, match="time"):
        AuditEntry.build(**{**FIELDS, "time": time})
    log = AuditLog(store, KEY, ORIGIN)
    with pytest.raises(InputError, match="time"):
        log.append({"kind": "deny", "principal": "did:key:zAlice", "time": time})
    with pytest.raises(InputError, match="time"):
        log.append_many([{"kind": "deny", "principal": "did:key:zAlice", "time": time}])
    assert log.size() == 0


@pytest.mark.parametrize("time", NO_SUCH_TIMES)
def test_a_stored_entry_with_a_time_that_names_no_moment_still_reads_back(time: str) -> None:
    """Logs written before times were checked as dates may hold such an entry: it is read as it
    is (its bytes are what the checkpoints signed), never made unreadable."""
    data = encode_entry(FIELDS).replace(TIME.encode(), time.encode())
    assert AuditEntry.from_bytes(data).time == time


def test_leap_days_and_the_last_second_of_a_day_are_times() -> None:
    for time in ("2024-02-29T23:59:59.999999Z", "2000-02-29T00:00:00.000000Z", "0001-01-01T00:00:00.000000Z"):
        assert AuditEntry.from_bytes(encode_entry({**FIELDS, "time": time})).time == time


@pytest.mark.parametrize("origin", [ORIGIN + "\n", "r35.example/\naudit", ORIGIN + " ", ORIGIN + "\udcff"])
def test_a_log_origin_that_is_no_key_name_is_refused_when_the_log_is_opened(
    store: Store, origin: str
) -> None:
    """The origin pattern ended in ``$``: an origin with a trailing newline passed the check that
    refuses whitespace, so ``verifier_key`` printed a key with a line break in it and
    ``Checkpoint.text`` a body with a blank line. An origin holding a lone surrogate (an
    ``AGENTGATE_LOG_ORIGIN`` that is not UTF-8) passed too, and the first checkpoint raised
    ``UnicodeEncodeError`` instead of ``InputError``."""
    with pytest.raises(InputError, match="origin"):
        AuditLog(store, KEY, origin)
    with pytest.raises(InputError, match="origin"):
        verifier_key(origin, KEY.public)
    with pytest.raises(InputError, match="origin"):
        Checkpoint(origin, 1, bytes(32)).text()


def test_verify_with_a_trailing_newline_in_the_origin_is_unusable_input_not_tampering(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``AGENTGATE_LOG_ORIGIN`` read from a file kept its line break: ``audit verify`` of an
    intact log then said ``TAMPERED`` (exit 1) for every checkpoint, where a malformed origin is
    unusable input (exit 2), as an origin with a space already was."""
    db = audit_cli_store(tmp_path, monkeypatch)
    with SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store), ORIGIN)
        log.append({"kind": "allow", "principal": "did:key:zAlice"})
        log.checkpoint()
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    assert main(["audit", "verify"]) == 0
    capsys.readouterr()
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN + "\n")
    assert main(["audit", "verify"]) == 2
    captured = capsys.readouterr()
    assert "TAMPERED" not in captured.out
    assert "origin" in captured.err


def test_the_documented_principal_of_a_revoke_entry_is_who_gate_revoke_names(tmp_path: Path) -> None:
    """docs/audit-format.md said ``principal`` is a ``did:key`` for every kind, the revoker's
    for ``revoke``; ``Gate.revoke(by=...)`` records the name it is given (``operator`` by
    default), so a reader that checked the documented type refused agentgate's revoke entries."""
    keys = {name: SigningKey(bytes([n]) * 32) for n, name in enumerate(("root", "agent"), 1)}
    policy = parse_policy(POLICY.format(**{n: k.did for n, k in keys.items()}), source="p.yaml")
    gate = Gate(policy, SQLiteStore(tmp_path / "agentgate.db"))
    try:
        agent = gate.issue(keys["root"], name="agent", key=keys["agent"], role="chat")
        gate.revoke(agent)
        revoked = [e for e in gate.audit.entries() if e.kind == "revoke"]
    finally:
        gate.close()
    assert [e.principal for e in revoked] == ["operator"]
    row = next(line for line in DOC.read_text().splitlines() if line.startswith("| `principal` |"))
    assert "Gate.revoke(by=...)" in row and "not necessarily a `did:key`" in row
