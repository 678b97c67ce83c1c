"""Review R84: ``encode_bounded``'s first step records each large ``args`` value by a reason of
about a hundred bytes; with many values all of them were elided, ``args`` was left empty, so the
third step (the whole ``args`` by one reason) did nothing, and the reasons alone were over the
limit: the entry was refused with ``InputError`` (for an allow, ``Gate.authorize`` raised and rolled
back) though docs/audit-format.md says an entry large because of its arguments is not refused. Now
those reasons give way to one ``elided args`` reason of the caller's whole ``args``.
"""

from __future__ import annotations

from pathlib import Path

from agentgate.audit.entry import AuditEntry, canonical_json, elision, encode_bounded
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog

BASE = {
    "index": 0,
    "time": "2026-01-01T00:00:00.000000Z",
    "kind": "allow",
    "principal": "did:key:z6Mk" + "a" * 44,
}
ARGS = {f"f{i:02d}": "x" * 120 for i in range(40)}


def test_many_elided_values_give_way_to_one_reason_for_the_whole_args() -> None:
    data = encode_bounded({**BASE, "args": ARGS, "reasons": ["capability covers call"]}, 4096)
    entry = AuditEntry.from_bytes(data)
    assert len(data) <= 4096 and entry.args == {}
    assert entry.reasons == ("capability covers call", elision("args", canonical_json(ARGS)))


def test_a_few_large_values_are_still_elided_one_by_one() -> None:
    args = {"small": 1, "big": "y" * 5000}
    entry = AuditEntry.from_bytes(encode_bounded({**BASE, "args": args}, 4096))
    assert entry.args == {"small": 1}
    assert entry.reasons == (elision("args.big", canonical_json("y" * 5000)),)


def test_the_log_writes_such_an_entry(tmp_path: Path) -> None:
    log = AuditLog(SQLiteStore(tmp_path / "a.db"), SigningKey(b"\x04" * 32), max_entry_bytes=4096)
    index = log.append({"kind": "allow", "principal": "did:key:zAlice", "args": ARGS})
    assert log.entry(index).args == {} and log.entry(index).reasons[0].startswith("elided args: ")
    assert log.verify().ok
