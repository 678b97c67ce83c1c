"""Review R88d: an empty ``AGENTGATE_LOG_KEY`` (review R88) is refused by the read-only verbs
that look the key up too, ``audit show`` and ``audit verify`` (exit 2, naming the variable), not
only by ``audit checkpoint``; docs/operations.md said so of the refusal in general only. It says
which verbs now, and this holds it to what they do (``audit verify --key FILE`` looks nothing up)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _cli import cli

DOCS = Path(__file__).resolve().parents[1] / "docs" / "operations.md"
REFUSAL = (
    "agentgate: error: AGENTGATE_LOG_KEY is set but empty: point it at the log key's file, "
    "or unset it for the default\n"
)


@pytest.fixture
def store(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "s.db"))
    monkeypatch.chdir(tmp_path)
    for verb in (["store", "init"], ["audit", "checkpoint"]):
        code, _, err = cli(capsys, *verb)
        assert code == 0, err
    monkeypatch.setenv("AGENTGATE_LOG_KEY", "")
    return tmp_path


@pytest.mark.parametrize("verb", [["audit", "show"], ["audit", "verify"]], ids=["show", "verify"])
def test_read_only_verbs_refuse_an_empty_log_key(
    verb: list[str], store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(capsys, *verb) == (2, "", REFUSAL)


def test_verify_with_a_key_file_and_verbs_needing_no_key_run(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    public = next(store.rglob("*.pub"))
    code, out, _ = cli(capsys, "audit", "verify", "--key", str(public))
    assert code == 0 and out.startswith("intact")
    code, _, _ = cli(capsys, "tasks", "dead-letters")
    assert code == 0


def test_docs_say_which_verbs_refuse_it() -> None:
    text = " ".join(DOCS.read_text().split())
    assert (
        "by every verb that looks the key up, the read-only `audit show` and `audit verify` as well as "
        "`audit checkpoint` (exit 2, naming the variable; `audit verify --key FILE` looks nothing up"
    ) in text
