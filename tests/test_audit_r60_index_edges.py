"""``audit prove``, ``explain``, ``show`` and ``report`` at the edges of the log, on both stores.

Review R60's hostile pass (nothing was found broken; these pin what it saw): on an empty log and a
log of one entry, an index at the end of the log or at 2**63-1 is refused by ``prove`` and
``explain`` (``BeyondLogEnd``, exit 2, saying how many entries the log has), a negative index and
2**63 by the argument parser (exit 2), and ``show --from`` at or past the end lists nothing, exit 0
(a reader polling from the next index gets nothing until an entry is appended); ``report`` writes
the report of an empty log; nothing prints a traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from test_audit_r57_repairs import ENTRY, ORIGIN, _postgres, _run

from agentgate.store import SQLiteStore, Store
from agentgate.store.audit import AuditLog, open_log_key

END = 2**63 - 1


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def store_url(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """The CLI's store (either kind) with its log key in ``tmp_path``."""
    monkeypatch.setattr("agentgate.cli.main.GROUPS", ("agentgate.cli.audit",))
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    monkeypatch.delenv("AGENTGATE_LOG_PREVIOUS_KEYS", raising=False)
    monkeypatch.setenv("AGENTGATE_LOG_KEY", str(tmp_path / "keys" / "log.key"))
    url = (
        str(tmp_path / "agentgate.db")
        if request.param == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    monkeypatch.setenv("AGENTGATE_STORE", url)
    yield url


def _opened(url: str) -> Store:
    return SQLiteStore(url) if not url.startswith("postgres") else _postgres(url)


def _log(url: str, size: int) -> None:
    with _opened(url) as store:
        log = AuditLog(store, open_log_key(store, create=True), ORIGIN)
        if size:
            log.append_many([ENTRY] * size)


@pytest.mark.parametrize("size", [0, 1])
def test_indexes_at_the_edges_of_a_small_log(
    store_url: str, size: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R60: hostile pass over prove/explain/show/report at the end of the log, 0, negative and 2**63."""
    _log(store_url, size)
    proof = str(tmp_path / "proof.txt")
    capsys.readouterr()
    for index in (size, END):
        for argv in (["audit", "prove", str(index), "--out", proof], ["audit", "explain", str(index)]):
            assert _run(argv) == 2
            said = capsys.readouterr()
            assert said.out == ""
            assert said.err == (
                f"agentgate: error: audit log has only {size} {'entry' if size == 1 else 'entries'}; "
                f"entry {index} is past its end\n"
            )
        assert _run(["audit", "show", "--from", str(index)]) == 0
        assert capsys.readouterr() == ("", "")
    for index in ("-1", str(2**63)):
        for argv in (["audit", "prove", index, "--out", proof], ["audit", "show", "--from", index]):
            assert _run(argv) == 2
            assert "an entry index is 0 or more, below 2**63" in capsys.readouterr().err
    assert not Path(proof).exists()
    if size:
        assert _run(["audit", "prove", "0", "--out", proof]) == 0
        assert capsys.readouterr().out.startswith("wrote the proof of entry 0 (0 hashes) to ")
        assert _run(["audit", "show", "--last", str(END)]) == 0
        lines = capsys.readouterr().out.splitlines()
        assert len(lines) == 1 and lines[0].split()[0] == "0"
    assert _run(["audit", "report", "--out", str(tmp_path / "report.html")]) == 0
    counted = "1 entry" if size == 1 else f"{size} entries"  # review R68: no "1 entries"
    assert capsys.readouterr().out.endswith(f": {counted}, intact\n")
