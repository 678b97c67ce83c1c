"""A checkpoint note, a proof bundle, entry fields or indexes of the wrong type are ``InputError``
naming the argument.

Until review R89 a saved checkpoint read from a file in binary mode (bytes) made
``AuditLog.verify``, ``checkpoint``, ``prove`` and ``open_checkpoint``, and ``verify_bundle``,
fail deep inside with a bare ``TypeError`` (``verify``, which never raises for a tampered log,
included); ``open_checkpoint(None)`` raised ``AttributeError``, ``append(None)`` ``TypeError``,
``append_many([[...]])`` ``ValueError`` and ``entries_at(None)`` ``TypeError``. Indexes and sizes
of any wrong type were already ``InputError`` (``merkle.tree_integer``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from agentgate.audit import Checkpoint, ProofBundle, open_checkpoint, verify_bundle
from agentgate.errors import InputError
from agentgate.keys import SigningKey
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog

KEY = SigningKey(b"\x47" * 32)
ORIGIN = "r89.example/audit"
BINARY = ": decode the bytes (a file read in binary mode) as UTF-8"


@pytest.fixture
def log(tmp_path: Path) -> AuditLog:
    store = SQLiteStore(tmp_path / "agentgate.db")
    log = AuditLog(store, KEY, ORIGIN)
    log.append_many([{"kind": "allow", "principal": "did:key:zA"}] * 3)
    log.checkpoint()
    return log


def _refused(call: Callable[[], object]) -> str:
    with pytest.raises(InputError) as refused:
        call()
    return str(refused.value)


def test_a_note_or_bundle_given_as_bytes_is_refused_naming_the_argument(log: AuditLog) -> None:
    note = log.latest_checkpoint()
    assert note is not None
    data, bundle = note.encode(), log.prove(0).text().encode()
    checkpoint = "a signed checkpoint as text (str), got bytes" + BINARY
    assert _refused(lambda: log.verify(data)) == f"saved_checkpoint must be {checkpoint}"  # type: ignore[arg-type]
    assert _refused(lambda: log.checkpoint(saved=data)) == f"saved must be {checkpoint}"  # type: ignore[arg-type]
    assert _refused(lambda: log.prove(0, data)) == f"checkpoint_note must be {checkpoint}"  # type: ignore[arg-type]
    assert _refused(lambda: log.open_checkpoint(data)) == f"note must be {checkpoint}"  # type: ignore[arg-type]
    assert _refused(lambda: verify_bundle(bundle, KEY.public)) == (  # type: ignore[arg-type]
        "text must be a proof bundle as text (str), got bytes" + BINARY
    )
    assert _refused(lambda: ProofBundle.parse(bundle)).startswith("text must be a proof bundle")  # type: ignore[arg-type]
    assert _refused(lambda: Checkpoint.parse(b"x\n1\n")).startswith("text must be a checkpoint body")  # type: ignore[arg-type]
    assert log.checkpoints() == [note]  # nothing signed


def test_none_for_a_note_is_refused_naming_the_argument() -> None:
    assert _refused(lambda: open_checkpoint(None, KEY.public)) == (  # type: ignore[arg-type]
        "note must be a signed checkpoint as text (str), got NoneType"
    )


def test_entry_fields_and_indexes_of_the_wrong_type_are_refused_and_nothing_is_written(
    log: AuditLog,
) -> None:
    fields = "must be a mapping of an entry's field names to values, got"
    assert _refused(lambda: log.append(None)) == f"fields {fields} NoneType"  # type: ignore[arg-type]
    assert _refused(
        lambda: log.append_many([{"kind": "allow", "principal": "did:key:zA"}, ["kind", "allow"]])
    ) == (  # type: ignore[list-item]
        f"batch[1] {fields} list"
    )
    assert _refused(lambda: log.append_many(None)) == (  # type: ignore[arg-type]
        "batch must be a sequence of entries' fields, got NoneType"
    )
    assert _refused(lambda: log.entries_at(None)) == (  # type: ignore[arg-type]
        "indexes must be an iterable of entry indexes, got NoneType"
    )
    assert _refused(lambda: log.entries_at(b"\x01")).startswith("indexes must be")
    assert log.size() == 3 and log.verify().ok
