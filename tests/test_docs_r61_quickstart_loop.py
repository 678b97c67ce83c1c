"""docs/quickstart.md's resume loop (several interrupts, resumed together by id) run as the page
says: in place of the single resume, after the page's other blocks, in a fresh directory."""

from __future__ import annotations

import re
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest

from agentgate.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "quickstart.md").read_text()


def _blocks(language: str) -> list[str]:
    found = re.findall(rf"^( *)```{language}\n(.*?)^\1```", PAGE, flags=re.S | re.M)
    return [textwrap.dedent(block) for _, block in found]


def test_the_resume_loop_in_place_of_the_single_resume_closes_the_gate_and_keeps_every_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R61: the loop block replaces the single resume, whose last line is `gate.close()`
    ("a program that skips it can lose the last ones"), but the loop had no `gate.close()`: a reader
    following the page literally dropped it. The loop now closes the gate, and run in place of the
    single resume it leaves the six entries the page's `audit verify` shows."""
    python = _blocks("python")
    single = next(block for block in python if "Command(resume=approval)" in block)
    loop = next(block for block in python if "while pending" in block)
    assert "gate.close()" in single
    assert "gate.close()" in loop, loop
    shutil.copy(ROOT / "policies" / "support.yaml", tmp_path / "support.yaml")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AGENTGATE_STORE", raising=False)
    for line in _blocks("bash")[1].splitlines():
        command = line.split("#")[0].split()
        if command and command[0] == "agentgate":
            assert main(command[1:]) == 0, command
    scope: dict[str, Any] = {}
    exec("\n".join(block for block in python if block is not single), scope)
    assert "refunded 800" in str(scope["state"]["messages"][-2].content)
    assert main(["audit", "verify"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("intact: 6 entries")
