"""Review R95: an ``AGENTGATE_DEMO_DIR/NAME`` that no example made is a setting the example cannot
use, refused as every other such setting is (tests/test_examples_r63_environment.py): one line,
status 2, and nothing in it removed. Status 1 is the model endpoint's failure (docs/quickstart.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_examples_r63_environment import CHECKOUT, NAMES, _refused, _run
from test_examples_r63_environment import isolated as isolated  # the fixture


@pytest.mark.usefixtures("isolated")
@pytest.mark.parametrize("name", NAMES)
def test_a_demo_directory_no_example_made_ends_the_example_with_status_2(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Review R95: the refusal was ``sys.exit(message)``, status 1, which a script cannot tell from
    an endpoint failure; it now goes through the examples' one way to refuse a setting."""
    base = tmp_path / "demos"
    (base / name).mkdir(parents=True)
    (base / name / "mine.txt").write_text("the user's\n")
    monkeypatch.setenv("AGENTGATE_DEMO_DIR", str(base))
    line = _refused(*_run(CHECKOUT, name, capsys))
    assert line.startswith(f"{base / name} exists and was not made by an agentgate example")
    assert "AGENTGATE_DEMO_DIR" in line and line.endswith("(nothing was removed)")
    assert sorted(p.name for p in (base / name).iterdir()) == ["mine.txt"]
    assert (base / name / "mine.txt").read_text() == "the user's\n"
