"""docs/concepts.md's fourth worked example (authority chain opacity) run as printed, after the
page's set-up and its first three sections, in an empty directory; and the claims around the
examples that no other test ran from the command line.

Review R60: the fourth example said "replace its second link with one spliced from another chain"
and gave no way to do it, and the output it printed was not the command's (one line, without
``reasons``; ``grant check --json`` prints an indented object with ``reasons`` first). The page now
makes spliced.tok with the commands shown and prints the output's first lines as they are."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from agentgate.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "concepts.md").read_text()


def _block(after: str) -> str:
    """The first fenced block of the page after the text ``after``."""
    return PAGE.split(after, 1)[1].split("```\n", 1)[1].split("```", 1)[0]


def _lines(block: str) -> list[str]:
    """The command lines of a block, continuation lines joined, ``$ `` and comments taken off."""
    joined = block.replace("\\\n", " ").splitlines()
    return [line.removeprefix("$ ").split("  #")[0] for line in joined]


def _agentgate(capsys: pytest.CaptureFixture[str], line: str) -> tuple[int, str]:
    argv = shlex.split(line)
    assert argv[0] == "agentgate", line
    code = main(argv[1:])
    out = capsys.readouterr()
    return code, out.out + out.err


def _shell(line: str, cwd: Path) -> None:
    """A line that is not an ``agentgate`` command (the splice), as a shell runs it, with this
    Python as ``python3``."""
    line = line.replace("python3 ", f"{shlex.quote(sys.executable)} ", 1)
    subprocess.run(["bash", "-c", line], cwd=cwd, check=True, timeout=60)


@pytest.fixture
def walked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Path:
    """An empty directory after the page's set-up, section 2's delegation and section 3's revoke."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "agentgate.db"))
    for line in _lines(_block("run it in an empty directory):"))[1:]:
        assert _agentgate(capsys, line)[0] == 0, line
    assert _agentgate(capsys, _lines(_block("to the refunder's own key:"))[0])[0] == 0
    revoke = _lines(_block("every link of the chain against the store:"))[0]
    assert _agentgate(capsys, revoke)[0] == 0
    return tmp_path


def test_the_spliced_chain_of_section_4_is_made_and_refused_as_printed(
    walked: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R60: concepts.md's fourth example gave no way to splice a chain and printed output that was not the command's."""
    for line in _lines(_block("a chain the root granted the supervisor a second time:")):
        if line.startswith("agentgate "):
            assert _agentgate(capsys, line)[0] == 0, line
        elif line.strip():
            _shell(line, walked)
    shown = _block("The links no longer name each other by hash:").split("\n")
    code, out = _agentgate(capsys, _lines(shown[0] + "\n" + shown[1])[0])
    printed = shown[2 : shown.index("...")]
    assert code == 1 and out.splitlines()[: len(printed)] == printed, out
    finding = json.loads(out)["findings"][0]
    assert (finding["kind"], finding["code"]) == ("authority_chain_opacity", "parent_mismatch")


def test_a_dropped_or_swapped_link_is_root_has_parent_and_inspect_marks_the_broken_link(
    walked: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    segments = (walked / "refunder.tok").read_text().strip().split(".")
    (walked / "dropped.tok").write_text(".".join(segments[:1] + segments[3:5]) + "\n")
    (walked / "swapped.tok").write_text(".".join(segments[:1] + segments[3:5] + segments[1:3]) + "\n")
    check = " --as keys/refunder.key --trust keys/root.pub --tool payments.refund --json"
    check += """ --args '{"amount": 50, "currency": "EUR"}'"""
    for token in ("dropped.tok", "swapped.tok"):
        code, out = _agentgate(capsys, f"agentgate grant check {token}{check}")
        finding = json.loads(out)["findings"][0]
        assert code == 1 and (finding["kind"], finding["code"]) == (
            "authority_chain_opacity",
            "root_has_parent",
        )
    code, out = _agentgate(capsys, "agentgate grant inspect swapped.tok")
    assert "! authority_chain_opacity root_has_parent: " in out, out


def test_a_call_above_a_valid_delegation_is_call_not_covered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Section 1: "with a valid delegation of amount<=100, a call with amount=150 is denied with
    # call_not_covered", on section 2's delegation, before anything is revoked.
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "agentgate.db"))
    for line in _lines(_block("run it in an empty directory):"))[1:]:
        assert _agentgate(capsys, line)[0] == 0, line
    assert _agentgate(capsys, _lines(_block("to the refunder's own key:"))[0])[0] == 0
    code, out = _agentgate(
        capsys,
        "agentgate grant check refunder.tok --as keys/refunder.key --trust keys/root.pub"
        """ --tool payments.refund --args '{"amount": 150, "currency": "EUR"}'""",
    )
    assert code == 1 and "scope_creep call_not_covered [constraints.amount]: amount=150" in out, out
