"""``ProofBundle.text`` refuses fields no reader could read back, naming the field.

Until review R91 it checked none of them (R90 made ``Checkpoint.text`` refuse a size of ``True`` or
``1.0``): an index of ``True``, ``1.0`` or ``None`` was written as it prints, a bundle that
``verify_bundle`` and ``audit verify-proof`` refuse as malformed (``'True' is not a decimal
number``), and an entry or proof hash given as ``str``, or a note as ``bytes``, raised a bare
``TypeError``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_audit_tamper import KEY, ORIGIN

from agentgate.audit import ProofBundle, verify_bundle
from agentgate.errors import InputError
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog


@pytest.fixture
def bundle(tmp_path: Path) -> ProofBundle:
    with SQLiteStore(tmp_path / "audit.db") as store:
        log = AuditLog(store, KEY, ORIGIN)
        log.append_many([{"kind": "deny", "principal": "did:key:zAlice"}] * 3)
        return log.prove(1)


def _with(bundle: ProofBundle, **fields: Any) -> ProofBundle:
    given = {**vars(bundle), **fields}
    return ProofBundle(given["index"], given["entry"], given["proof"], given["checkpoint_note"])


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"index": True}, "proof bundle: index must be a whole number (an int), got True"),
        ({"index": 1.0}, "proof bundle: index must be a whole number (an int), got 1.0"),
        ({"index": None}, "proof bundle: index must be a whole number (an int), got None"),
        ({"index": -1}, "proof bundle: index must be 0 .. 2**64-1, got -1"),
        ({"entry": "{}"}, "proof bundle: entry must be bytes, got str"),
        ({"entry": b""}, "proof bundle: entry is empty"),
        ({"proof": ("x" * 32,)}, "proof bundle: proof[0] must be bytes, got str"),
        ({"proof": (b"",)}, "proof bundle: proof[0] is empty"),
        ({"proof": None}, "proof bundle: proof must be an iterable of hashes (bytes), got NoneType"),
        (
            {"checkpoint_note": b"note"},
            "checkpoint_note must be a signed checkpoint as text (str), got bytes",
        ),
        ({"checkpoint_note": ""}, "proof bundle: checkpoint_note is empty"),
    ],
    ids=[
        "index-True",
        "index-1.0",
        "index-None",
        "index-negative",
        "entry-str",
        "entry-empty",
        "proof-hash-str",
        "proof-hash-empty",
        "proof-None",
        "note-bytes",
        "note-empty",
    ],
)
def test_a_field_no_reader_opens_is_refused_by_name(
    bundle: ProofBundle, fields: dict[str, Any], said: str
) -> None:
    with pytest.raises(InputError) as refused:
        _with(bundle, **fields).text()
    assert str(refused.value).startswith(said)


def test_what_text_writes_verifies(bundle: ProofBundle) -> None:
    """A ``bytearray`` entry and a list of ``memoryview`` hashes are written as the bytes they hold."""
    written = _with(bundle, entry=bytearray(bundle.entry), proof=[memoryview(h) for h in bundle.proof]).text()
    assert written == bundle.text()
    entry, checkpoint = verify_bundle(written, KEY.public, ORIGIN)
    assert (entry.index, checkpoint.size) == (1, 3)
