"""What the offline examples print (`make demo` runs research_team.py), read as a newcomer reads it
(review R62): one screen, no line wider than 100 columns, a section for what was allowed, denied,
approved, scheduled and spent and the audit log's verdict, in that order, and the columns of each
table aligned. The structure is checked, not the words."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _examples import EXAMPLES, run_example

WIDTH = 100
SCREEN = 50


def _run(
    name: str, workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> str:
    """What ``python examples/NAME`` prints offline, run from ``workdir`` as `make demo` runs it
    from the checkout (in this process: the imports are made once)."""
    for variable in ("AGENTGATE_OPENAI_BASE_URL", "AGENTGATE_OPENAI_MODEL", "AGENTGATE_DEMO_DIR"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.chdir(workdir)
    status, out, err = run_example(EXAMPLES / name, capsys)
    assert status == 0, out + err
    assert err == ""
    return out


def _section(out: str, head: str) -> list[str]:
    """The lines under the section whose head starts with ``head``, up to the next blank line."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(head))
    body = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        body.append(line)
    return body


def _aligned(lines: list[str], pattern: str, right: tuple[int, ...] = ()) -> None:
    """Each line matches ``pattern``, and each of its groups starts at the same column on every
    line (ends, for the groups in ``right``: numbers aligned on their last digit)."""
    matches = [re.match(pattern, line) for line in lines]
    assert all(matches), "\n".join(line for line, m in zip(lines, matches, strict=True) if not m)
    for group in range(1, re.compile(pattern).groups + 1):
        columns = {m.end(group) if group in right else m.start(group) for m in matches if m}
        assert len(columns) == 1, (group, lines)


@pytest.mark.parametrize("name", ["research_team.py", "support_agent.py"])
def test_the_example_prints_one_screen_of_aligned_sections(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R62: research_team.py printed its refusals 124 columns wide and support_agent.py its
    approval request 181 wide, wrapping on a 100-column terminal; every line now fits in 100."""
    out = _run(name, tmp_path, monkeypatch, capsys)
    lines = out.splitlines()
    wide = [f"{len(line)}: {line}" for line in lines if len(line) > WIDTH]
    assert not wide, "\n".join(wide)
    assert len(lines) <= SCREEN, out

    heads = ["Decisions per agent", "Refused, and why:", "Approved by a human:"]
    heads += ["Scheduled"] if name == "research_team.py" else []
    heads += ["Spent", "Audit log:"]
    starts = [next((i for i, line in enumerate(lines) if line.startswith(h)), -1) for h in heads]
    assert -1 not in starts and starts == sorted(starts), (heads, starts)
    assert re.search(r"^Audit log: \d+ entries, .*VERIFIES$", out, re.M), out

    # each table: its columns start at one column on every row
    decisions = r"  \S+ +(\d+) allowed +(\d+) denied +(\d+) approval asked; +(\d+) model calls$"
    _aligned(_section(out, "Decisions per agent"), decisions, right=(1, 2, 3, 4))
    refused = _section(out, "Refused, and why:")
    assert refused and refused != ["  (none)"]
    _aligned(refused, r"  #\d+ +(\S+) +((?:tool|model):\S+) +(\S.*)$")
    _aligned(_section(out, "Approved by a human:"), r"  #\d+ +(\S+) +(\S.*)$")
    _aligned(_section(out, "Spent"), r"  grant \S+ of (\S+) +(\d+) of +(\d+) \S+$", right=(2, 3))
    if name == "research_team.py":
        _aligned(_section(out, "Scheduled"), r"  (\S+) +peak (\d+) +limit (\S+)$")
    else:
        _aligned(_section(out, "What the model was told:"), r"  (\S+) +(\S+) +(\S.*)$")
