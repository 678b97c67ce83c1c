"""Review R71 (r71-rev-d) of ``audit verify --json`` and of the signals held while a verb's
handler module is imported (``agentgate.cli._handlers._imported``).

``--json`` reads where a problem was found from the library's wording: a problem with the
reference index names an entry without ``entry N: `` at its start, a checkpoint larger than the
log names no place the parser knew, and a checkpoint whose root does not match names the entry
found at fault after its place; each came out as ``log`` or with no index.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from test_audit_r57_repairs import ENTRY, ORIGIN
from test_audit_r68_verify_counts import _cli

from agentgate.cli._handlers import handled_by
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog, open_log_key

OUTCOME = {"kind": "outcome", "principal": "did:key:zA", "resource": "tool:t", "ref": 0}


def _log(db: Path, entries: list[dict[str, object]]) -> str:
    """A log of ``entries`` under one checkpoint; returns the checkpoint (its signed note)."""
    with SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store, create=True), ORIGIN)
        log.append_many(entries)
        return log.checkpoint()


def _sql(db: Path, *statements: str) -> None:
    raw = sqlite3.connect(db)
    for statement in statements:
        raw.execute(statement)
    raw.commit()
    raw.close()


def _problems(
    db: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *more: str
) -> tuple[int, dict[str, object]]:
    code, out = _cli(db, ["audit", "verify", "--json", *more], monkeypatch, capsys)
    return code, json.loads(out)


@pytest.mark.parametrize(
    ("statement", "said", "index"),
    [
        (
            "UPDATE audit_refs SET ref = 2 WHERE idx = 1",
            "entry 1 refers to entry 0, but audit_refs says 2",
            1,
        ),
        ("DELETE FROM audit_refs WHERE idx = 1", "entry 1 refers to entry 0, but audit_refs has no row", 1),
        ("INSERT INTO audit_refs (idx, ref) VALUES (2, 0)", "audit_refs has a row for entry 2", 2),
    ],
)
def test_a_reference_index_problem_names_its_table_and_entry(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    statement: str,
    said: str,
    index: int,
) -> None:
    """Review R71: ``entry 1 refers to entry 0, but audit_refs ...`` came out as ``where`` ``log``
    and ``index`` null, and ``audit_refs has a row for entry 2 ...`` with ``index`` null,
    though each names the entry (docs/cli.md: ``index`` is null only where no entry is named).
    Rule: ``where`` ``audit_refs``, the table that is wrong, and ``index`` the entry named."""
    db = tmp_path / "agentgate.db"
    _log(db, [ENTRY, OUTCOME, ENTRY])
    _sql(db, statement)
    code, printed = _problems(db, monkeypatch, capsys)
    assert code == 1
    (problem,) = printed["problems"]  # type: ignore[misc]
    assert said in problem["message"]
    assert (problem["where"], problem["index"]) == ("audit_refs", index), problem


def test_a_checkpoint_larger_than_the_log_is_named_by_its_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R71: ``a checkpoint covers 3 entries but the log has 2: ...`` came out as ``where``
    ``log``. Rule: the checkpoint it is about, ``checkpoint of size 3``, as the other problems
    about one checkpoint name it."""
    db = tmp_path / "agentgate.db"
    _log(db, [ENTRY] * 3)
    _sql(db, "DROP TRIGGER audit_log_no_delete", "DELETE FROM audit_log WHERE idx = 2")
    code, printed = _problems(db, monkeypatch, capsys)
    assert code == 1
    covers = [p for p in printed["problems"] if "a checkpoint covers 3 entries" in p["message"]]  # type: ignore[union-attr]
    assert [(p["where"], p["index"]) for p in covers] == [("checkpoint of size 3", None)], printed


def test_a_root_mismatch_names_the_entry_found_at_fault(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R71: ``checkpoint of size 3: root does not match the entries; entry 0 holds the entry
    of index 1 ...`` had ``index`` null, though it names entry 0 (``first_bad_index`` 0). Rule:
    ``index`` is the entry the library found at fault."""
    db = tmp_path / "agentgate.db"
    _log(db, [ENTRY] * 3)
    _sql(
        db,
        "DROP TRIGGER audit_log_no_update",
        "UPDATE audit_log SET idx = -1 WHERE idx = 0",
        "UPDATE audit_log SET idx = 0 WHERE idx = 1",
        "UPDATE audit_log SET idx = 1 WHERE idx = -1",
    )
    code, printed = _problems(db, monkeypatch, capsys)
    assert code == 1 and printed["first_bad_index"] == 0
    (problem,) = (p for p in printed["problems"] if p["where"] != "log machinery")  # type: ignore[union-attr]
    assert problem["message"].startswith("checkpoint of size 3: root does not match the entries; entry 0 ")
    assert (problem["where"], problem["index"]) == ("checkpoint of size 3", 0), problem


def test_a_dropped_log_says_a_saved_checkpoint_was_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R71: a dropped log verified with ``--checkpoint FILE`` printed ``saved_checkpoint``
    false (docs/cli.md: whether ``--checkpoint`` was given). Rule: true."""
    db = tmp_path / "agentgate.db"
    saved = tmp_path / "cp.txt"
    saved.write_text(_log(db, [ENTRY] * 2), encoding="utf-8")
    _sql(db, "DROP TABLE audit_log", "DROP TABLE audit_checkpoints")
    code, printed = _problems(db, monkeypatch, capsys, "--checkpoint", str(saved))
    assert code == 1 and printed["log_exists"] is False
    assert printed["saved_checkpoint"] is True


def test_no_log_and_a_saved_checkpoint_say_what_it_signs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R71: a store holding no log and no record of one, verified against a saved
    checkpoint of 2 entries that opens under the log key, printed ``signed_size`` 0 (docs/cli.md:
    the largest size a checkpoint that opened signs). Rule: 2."""
    db = tmp_path / "agentgate.db"
    saved = tmp_path / "cp.txt"
    saved.write_text(_log(db, [ENTRY] * 2), encoding="utf-8")
    _sql(db, "DROP TABLE audit_log", "DROP TABLE audit_checkpoints", "DROP TABLE agentgate_store_parts")
    code, printed = _problems(db, monkeypatch, capsys, "--checkpoint", str(saved))
    assert code == 1 and printed["log_exists"] is False
    assert printed["signed_size"] == 2 and printed["saved_checkpoint"] is True


class Stop(BaseException):
    """What the handlers the tests put in place of Ctrl-C's and SIGTERM's raise."""


def _stop(signum: int, frame: object) -> None:
    raise Stop(signum)


@pytest.fixture
def handlers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``_stop`` as the handler of SIGINT and SIGTERM, put back as they were after the test;
    ``tmp_path`` on the import path."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = {signum: signal.signal(signum, _stop) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


def _module(tmp_path: Path, name: str, body: str, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / f"{name}.py").write_text(body + "IMPORTED_WHOLE = True\ndef run(args):\n    return 0\n")
    monkeypatch.delitem(sys.modules, name, raising=False)


def test_a_second_signal_during_the_import_acts_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, handlers: None
) -> None:
    """Review R71: every Ctrl-C and SIGTERM during a handler module's import was held until the
    import ended: an import that hangs (a network filesystem, a lock) could be stopped by
    nothing short of SIGKILL. Rule: the first is held (the import is whole, then it acts); a
    second, the operator insisting, acts at once, and the handlers are put back."""
    _module(
        tmp_path,
        "r71_rev_d_hung",
        "import os, signal\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "for _ in range(1000):\n    pass\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "for _ in range(1000):\n    pass\n",
        monkeypatch,
    )
    with pytest.raises(Stop):
        handled_by("r71_rev_d_hung", "run")(None)  # type: ignore[arg-type]
    assert not getattr(sys.modules.get("r71_rev_d_hung"), "IMPORTED_WHOLE", False)
    assert signal.getsignal(signal.SIGINT) is _stop and signal.getsignal(signal.SIGTERM) is _stop


def test_a_signal_while_the_handlers_are_put_back_leaves_none_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, handlers: None
) -> None:
    """Review R71: the held handlers were put back one by one with both signals live: a Ctrl-C
    landing once SIGINT's handler was back raised there, before SIGTERM's was, and SIGTERM stayed
    held by a handler that notes it for no one, for as long as the process lived. Rule: both are
    put back whatever arrives meanwhile (the signal then acts once they are)."""
    _module(tmp_path, "r71_rev_d_plain", "", monkeypatch)
    fired: list[bool] = []

    def line(frame: FrameType, event: str, arg: Any) -> Any:
        imported = getattr(sys.modules.get("r71_rev_d_plain"), "IMPORTED_WHOLE", False)
        if (
            not fired
            and imported
            and signal.getsignal(signal.SIGINT) is _stop
            and signal.getsignal(signal.SIGTERM) is not _stop
        ):
            fired.append(True)  # one handler put back, the other not yet: Ctrl-C lands now
            signal.raise_signal(signal.SIGINT)
        return line

    def call(frame: FrameType, event: str, arg: Any) -> Any:
        return line if frame.f_globals.get("__name__") == "agentgate.cli._handlers" else None

    sys.settrace(call)
    try:
        with pytest.raises(Stop):
            handled_by("r71_rev_d_plain", "run")(None)  # type: ignore[arg-type]
    finally:
        sys.settrace(None)
    assert fired, "the handlers were never between put back and held"
    assert signal.getsignal(signal.SIGTERM) is _stop and signal.getsignal(signal.SIGINT) is _stop
