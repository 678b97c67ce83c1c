"""docs/concepts.md's first three worked examples: each ``$ agentgate ...`` block run after the
page's set-up, in an empty directory, and what it prints compared with what the page shows.

The page wraps a long line and writes ``...`` where the output holds a value of this run (a
grant id, a time, a did:key); the comparison joins the lines and reads each ``...`` (with the hex
digits before it) as any text. tests/test_docs_r60_concepts.py runs the fourth example.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from agentgate.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "concepts.md").read_text(encoding="utf-8")


def _block(after: str) -> str:
    """The first fenced block of the page after the text ``after``."""
    return PAGE.split(after, 1)[1].split("```\n", 1)[1].split("```", 1)[0]


def _commands(block: str) -> list[tuple[str, str, int | None]]:
    """``(command, shown output, shown exit status)`` for each ``$ agentgate`` line of a block."""
    joined = block.replace("\\\n", " ").splitlines()
    runs: list[tuple[str, list[str], int | None]] = []
    for line in joined:
        if line.startswith("$ echo $?"):
            runs[-1] = (runs[-1][0], runs[-1][1], -1)
        elif line.startswith("$ "):
            runs.append((line.removeprefix("$ "), [], None))
        elif runs and runs[-1][2] == -1:
            runs[-1] = (runs[-1][0], runs[-1][1], int(line))
        else:
            runs[-1][1].append(line)
    return [(command, "\n".join(shown), status) for command, shown, status in runs]


def _shown_as_pattern(shown: str) -> re.Pattern[str]:
    words = " ".join(shown.split())
    parts = re.split(r"[0-9a-f]*\.\.\.", words)
    return re.compile(".*?".join(re.escape(part) for part in parts), re.S)


def _agentgate(capsys: pytest.CaptureFixture[str], line: str) -> tuple[int, str]:
    argv = shlex.split(line)
    assert argv[0] == "agentgate", line
    code = main(argv[1:])
    out = capsys.readouterr()
    return code, out.out + out.err


@pytest.mark.parametrize(
    "section",
    [
        "more than it holds:",
        "tries to use the refunder's\ntoken:",
        "every link of the chain against the store:",
        "so every\ngrant can be taken back by letting its root expire:",
    ],
)
def test_each_example_prints_what_the_page_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], section: str
) -> None:
    """Review R63: sections 1 to 3 run as printed print what the page shows (section 2 showed
    each did:key as ``did:key:z6Mk...(supervisor)``, a form the command never prints: it shortens
    a did:key to its first and last characters, ``did:key:z6MkfWdF...7eSyAL``)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AGENTGATE_STORE", str(tmp_path / "agentgate.db"))
    setup = _block("run it in an empty directory):").replace("\\\n", " ").splitlines()[1:]
    for line in [*setup, _block("to the refunder's own key:").replace("\\\n", " ").strip()]:
        assert _agentgate(capsys, line.split("  #")[0])[0] == 0, line
    for command, shown, status in _commands(_block(section)):
        code, out = _agentgate(capsys, command)
        assert _shown_as_pattern(shown).fullmatch(" ".join(out.split())), (shown, out)
        assert code == (status if status is not None else 1 if shown.startswith("deny") else 0)
