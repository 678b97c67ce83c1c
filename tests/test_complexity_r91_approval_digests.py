"""Review R91: ``approval sign --store`` hashed every reason the payload adds (up to a 1 MiB
payload's, some 30,000) once for each later ``approval_required`` entry of the request, to read
the reasons those entries keep by digest: about 25 ms an entry, seconds at 200 entries, before
the approver was told anything. The payload's reasons are now hashed once.

Rule: the reasons an approver is shown as not counted, each with the entries that record it
(in words where an entry keeps it by digest), are found with one digest per reason the payload
adds, however many later entries there are."""

from __future__ import annotations

import pytest

import agentgate.cli.approval as approval
from agentgate.audit.entry import AuditEntry, elision

DID = "did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK"


def _entry(index: int, *reasons: str) -> AuditEntry:
    return AuditEntry(
        index=index,
        time="2026-12-07T00:00:00.000000Z",
        kind="approval_required",
        principal=DID,
        reasons=reasons,
    )


@pytest.mark.parametrize("later_entries", [2, 200])
def test_the_payloads_reasons_are_hashed_once_however_many_entries_refer_to_the_request(
    later_entries: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    hashed: list[str] = []

    def counted(field: str, data: bytes) -> str:
        hashed.append(field)
        return elision(field, data)

    monkeypatch.setattr(approval, "elision", counted)
    gate = "approval gate g applies: 1 of alice must approve within 900s"
    forged = "approval not counted: its signature does not verify"
    kept_by_digest = "approval not counted: its approver is not one of this call's approvers"
    added = [forged, kept_by_digest, *(f"approval not counted: added on the way {i}" for i in range(50))]
    later = [
        _entry(1 + i, gate, forged if i % 2 else elision("reason", kept_by_digest.encode("utf-8")))
        for i in range(later_entries)
    ]

    uncounted, unheld = approval._not_counted(_entry(0, gate), later, added)

    assert len(hashed) == len(added)  # not len(added) x len(later)
    assert dict(uncounted) == {
        kept_by_digest: tuple(e.index for e in later[0::2]),
        forged: tuple(e.index for e in later[1::2]),
    }
    assert unheld == 50
