"""Review R82: the command line took ``-0`` as an entry index. The parser reads a minus sign only to
say that an index is 0 or more (``-1``), and ``int("-0")`` is 0, which passed: ``agentgate audit
prove -0 --out FILE`` wrote the proof of entry 0 and ``audit show --from -0`` listed the log. An
INDEX is ASCII digits only (docs/audit-format.md): ``-0`` (``-00``...) is now refused as a sign,
as ``+1`` is, exit 2, nothing written, and ``-1`` keeps its own words.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _cli import cli
from _signed_log import log_environment, signed_log  # noqa: F401  (the fixture: the origin, no key or store named)


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    db = tmp_path / "store" / "agentgate.db"
    signed_log(db, 2)
    monkeypatch.setenv("AGENTGATE_STORE", str(db))
    return db


@pytest.mark.parametrize("index", ["-0", "-00", "+1"])
def test_a_signed_zero_is_no_entry_index(
    db: Path, index: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    proof = tmp_path / "proof.txt"
    for argv in (
        ["audit", "prove", index, "--out", str(proof)],
        ["audit", "show", "--from", index],
        ["audit", "explain", index],
    ):
        code, out, err = cli(capsys, *argv)
        assert (code, out) == (2, ""), (argv, out, err)
        assert f"expected an entry index (digits 0-9), got {index!r}" in err, (argv, err)
    assert not proof.exists()


def test_a_negative_index_keeps_its_words(db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = cli(capsys, "audit", "show", "--from", "-1")
    assert (code, out) == (2, "") and "an entry index is 0 or more, below 2**63; got '-1'" in err, err
    code, out, err = cli(capsys, "audit", "show", "--from", "0")
    assert code == 0 and len(out.splitlines()) == 2, (out, err)
