"""Review R82: a ``\\U`` escape above U+10FFFF (``"\\U00110000"``, ``"\\UFFFFFFFF"``) raised
Python's ``ValueError``/``OverflowError`` from PyYAML's own scanner, which turns the escape into a
character unchecked: with libyaml too, since a file libyaml refuses is parsed again by PyYAML's
parser to say where (``_refused``). ``agentgate policy lint`` printed a traceback and exited 1,
the code of "an error finding"; an inventory failed the same way. It is now a ``PolicyError``
(``InventoryError``) at the escape, whichever parser reads, and the command line's exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_yaml import _error, parser  # noqa: F401 (the fixture)

from agentgate.cli.main import main
from agentgate.dispatch.inventory import parse_inventory
from agentgate.errors import InventoryError

pytestmark = pytest.mark.usefixtures("parser")
"""Every test runs on both parsers (libyaml and the pure-Python one)."""


@pytest.mark.parametrize("escape", ["\\U00110000", "\\UFFFFFFFF", "\\U7FFFFFFF"])
def test_an_escape_beyond_the_last_code_point_is_refused_at_the_escape(escape: str) -> None:
    error = _error(f'version: 1\nname: "{escape}"\n')
    assert (error.line, error.column) == (2, 10), error
    assert "beyond U+10FFFF" in error.message, error.message


def test_the_last_code_point_still_loads() -> None:
    from agentgate._yaml import load_yaml

    data, _ = load_yaml('a: "\\U0010FFFF"\n', source="p.yaml")
    assert data == {"a": "\U0010ffff"}


def test_an_inventory_is_refused_alike() -> None:
    with pytest.raises(InventoryError, match=r"beyond U\+10FFFF") as refused:
        parse_inventory('version: 1\nbackends: ["\\U00110000"]\n', source="inv.yaml")
    assert str(refused.value).startswith("inv.yaml:2:"), refused.value


def test_policy_lint_exits_2_with_a_json_answer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text('version: 1\nname: "\\U00110000"\n')
    assert main(["policy", "lint", str(path), "--json"]) == 2
    out, err = capsys.readouterr()
    answer = json.loads(out)
    assert answer["valid"] is False and "beyond U+10FFFF" in json.dumps(answer), answer
    assert err == "", err
