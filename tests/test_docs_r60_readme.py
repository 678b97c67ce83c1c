"""README.md read as a newcomer reads it: its two commands say what the Makefile does, its list of
the command line's verbs is the command's own, and every figure of "Measured" names a benchmark
that exists and runs as the section says (``--json``, ``--quick``)."""

from __future__ import annotations

import re
from pathlib import Path

from agentgate.cli.main import GROUPS

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
MAKEFILE = (ROOT / "Makefile").read_text()


def _section(title: str) -> str:
    return README.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_each_make_command_names_every_extra_it_installs() -> None:
    """Review R60: README said `make test` installs the test extras; it installs test and bench."""
    block = _section("Two commands").split("```sh\n", 1)[1].split("```", 1)[0]
    said = {line.split()[1]: line for line in block.splitlines() if line.startswith("make ")}
    stamps = {"demo": "$(DEMO_STAMP)", "test": "$(STAMP)"}
    for target, stamp in stamps.items():
        rule = MAKEFILE.split(f"\n{stamp}:", 1)[1].split("\n\n", 1)[0]
        (extras,) = re.findall(r"-e '\.\[([\w,]+)\]'", rule)
        for extra in extras.split(","):
            assert re.search(rf"\b{extra}\b", said[target]), (target, extra, said[target])
    assert "examples/research_team.py" in MAKEFILE.split("\ndemo:", 1)[1].split("\n\n", 1)[0]


def test_the_verbs_readme_lists_are_the_commands_verbs() -> None:
    """Review R60: README's list of the command line's verbs left out `agentgate budget`."""
    (listed,) = re.findall(r"\(`agentgate ([a-z]+(?: \| [a-z]+)+)`\)", README)
    verbs = [module.rpartition(".")[2] for module in GROUPS]
    assert sorted(listed.split(" | ")) == sorted(verbs)


def test_every_figure_names_a_benchmark_that_takes_the_flags_the_section_gives() -> None:
    measured = _section("Measured")
    rows = [line for line in measured.splitlines() if line.startswith("| `")]
    assert len(rows) >= 10
    for row in rows:
        name = re.match(r"\| `(\w+\.py)` \|", row)
        assert name, row
        source = (ROOT / "benchmarks" / name.group(1)).read_text()
        assert '"--json"' in source and '"--quick"' in source, name.group(1)
    for test in re.findall(r"`(tests/test_\w+\.py)`", measured):
        assert (ROOT / test).exists(), test
