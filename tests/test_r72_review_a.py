"""Review R72 (helper r72-rev-a) of the round's changes: a misspelt required field in a policy
(agentgate/policy/_load.py) and ``audit prove/report --out`` over a saved checkpoint
(agentgate/cli/audit.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _cli import cli
from test_audit_r57_repairs import ENTRY, ORIGIN

from agentgate.errors import PolicyError
from agentgate.policy import parse_policy
from agentgate.store import SQLiteStore
from agentgate.store.audit import AuditLog, open_log_key

POLICY = """\
version: 1
principals:
  bob: {kind: human}
tools:
  mail.send: {}
"""


def _refused(text: str) -> PolicyError:
    with pytest.raises(PolicyError) as info:
        parse_policy(POLICY + text)
    return info.value


def test_two_misspelt_required_fields_are_two_errors() -> None:
    """Review R72: with two required fields misspelt (``inpt:``, ``outpt:``), only the first pair
    was counted once: four errors of pydantic (two missing, two unknown) were reported as "(and 2
    more errors)", three mistakes, where the writer made two."""
    error = _refused("models:\n  m1:\n    cost_per_mtok: {inpt: 1, outpt: 2}\n")
    assert error.message == "unknown field models.m1.cost_per_mtok.inpt (and 1 more error)"
    assert error.hint == "did you mean 'input'?"


def test_a_misspelt_required_field_after_another_error_is_counted_once() -> None:
    """Review R72: a misspelt required field was counted once only when its missing error came
    first: after another error (a value of the wrong type) it counted twice, "(and 2 more
    errors)" for two mistakes."""
    error = _refused(
        "  fetch: {timeout_s: soon}\napprovals:\n  g:\n    resource: tool:mail.send\n    approver: [bob]\n"
    )
    assert error.message.endswith("(and 1 more error)"), error.message


def test_a_field_of_another_section_is_not_called_a_misspelling_alone() -> None:
    """Review R72: a GPU written under ``models`` (``cost_per_gpu_hour:``, a field of ``gpus``)
    was reported with "did you mean 'cost_per_mtok'?" alone, as a typo: until R72 the hint said
    the field belongs to another section (review R63), which the writer needs to know (the two
    fields do not take the same value). Both are said now."""
    error = _refused("models:\n  m1:\n    cost_per_gpu_hour: 2.0\n")
    assert error.message == "unknown field models.m1.cost_per_gpu_hour"
    assert error.hint == (
        "did you mean 'cost_per_mtok'? 'cost_per_gpu_hour' is a field of another section: "
        "see docs/policy-reference.md"
    )


@pytest.fixture
def _environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTGATE_LOG_ORIGIN", ORIGIN)
    for name in ("AGENTGATE_LOG_KEY", "AGENTGATE_LOG_PREVIOUS_KEYS", "AGENTGATE_STORE"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("_environment")
@pytest.mark.parametrize("verb", [("prove", "1"), ("report",)], ids=["prove", "report"])
@pytest.mark.parametrize("copy", ["crlf", "bom+crlf"])
def test_a_saved_checkpoint_copied_as_windows_writes_it_is_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], verb: tuple[str, ...], copy: str
) -> None:
    """Review R72: ``prove/report --out`` refused a saved checkpoint only as ``checkpoint --out``
    writes it: the same checkpoint whose line breaks became CRLF (a copy through a Windows editor
    or share, with or without a byte order mark) was replaced with a bundle or a page, exit
    0, where ``checkpoint --out`` keeps it (naming the CRLF) and the evidence is one ``dos2unix``
    away. Refused alike now, the file kept byte for byte."""
    db = tmp_path / "agentgate.db"
    with SQLiteStore(db) as store:
        log = AuditLog(store, open_log_key(store, create=True), ORIGIN)
        log.append_many([ENTRY] * 3)
        note = log.checkpoint()
    saved = tmp_path / "cp.txt"
    data = (("\ufeff" if copy == "bom+crlf" else "") + note.replace("\n", "\r\n")).encode("utf-8")
    saved.write_bytes(data)
    code, out, err = cli(capsys, "audit", *verb, "--store", str(db), "--out", str(saved))
    assert (code, out) == (2, ""), (code, out, err)
    assert err.startswith(f"agentgate: error: {saved}: cannot write: it holds a saved checkpoint"), err
    assert saved.read_bytes() == data
