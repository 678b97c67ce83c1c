"""docs/architecture.md read as the map a newcomer follows: every module of ``agentgate/`` is in
the row of its folder, every file a row names is in that folder, and the imports that go against
the layer picture are the ones the page names.

Review R60: no test read architecture.md; 86 of the 173 modules were named on no row (``_json.py``,
``_lazy.py``, ``_time.py``, ``__main__.py``, ``audit/entry.py``, ``sim/traces.py``, most of
``tasks/`` and ``store/``...), and the page said that nothing imports upward, though ``store/``
imports ``audit/`` (drawn above it), ``store/broker_leases.py`` imports ``dispatch/broker/``, and
``GatedBroker`` imports the ``Gate``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "architecture.md").read_text()
PACKAGE = ROOT / "agentgate"


def _rows() -> dict[str, str]:
    """The map's rows, by the folder or module in their first cell (``agentgate/tasks/``)."""
    rows: dict[str, str] = {}
    for line in PAGE.splitlines():
        cells = re.match(r"\| (`[^|]+`) \| (.*) \|$", line)
        if cells:
            for name in re.findall(r"`([^`]+)`", cells.group(1)):
                rows[name] = cells.group(2)
    return rows


def _named(row: str, filename: str) -> bool:
    """Whether ``row`` names ``filename`` in backticks, alone or after a folder (`broker/_gated.py`)."""
    return re.search(rf"`(?:[\w/]+/)?{re.escape(filename)}`", row) is not None


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py")


def test_every_module_is_named_in_the_row_of_its_folder() -> None:
    """Review R60: 86 of the 173 modules of agentgate/ were named on no row of architecture.md's map."""
    rows = _rows()
    missing = []
    for module in _modules():
        relative = module.relative_to(ROOT).as_posix()
        if relative in rows:
            continue
        folders = [name for name in rows if name.endswith("/") and relative.startswith(name)]
        if not folders or not _named(rows[max(folders, key=len)], module.name):
            missing.append(relative)
    assert missing == [], f"{len(missing)} modules on no row of docs/architecture.md: {missing}"


def test_every_file_a_row_names_is_in_that_rows_folder() -> None:
    rows = _rows()
    for folder, row in rows.items():
        if not (folder.startswith("agentgate/") and folder.endswith("/")):
            assert (ROOT / folder).exists(), folder
            continue
        present = {p.name for p in (ROOT / folder).rglob("*.py")}
        for filename in re.findall(r"`(?:[\w/]+/)?(\w+\.py)`", row):
            elsewhere = (ROOT / filename).exists() or (PACKAGE / filename).exists()
            assert filename in present or elsewhere or filename == "calibrate_gpu.py", (folder, filename)


# The layer picture of the page, from the top: a package imports only what is on its own row or
# below it, except where the page says otherwise (EXCEPTIONS, each named on the page).
LAYERS = [
    {"integrations", "cli", "sim"},
    {"gate"},
    {"authority", "tasks", "dispatch"},
    {"policy"},
    {"store"},
    {"capabilities", "audit", "findings", "keys"},
    {"errors"},
]
EXCEPTIONS = {
    # the gateway and GatedBroker put their calls to the Gate: above it, though under dispatch/
    ("dispatch/gateway", "gate"),
    ("dispatch/broker", "gate"),
    # the broker lease rows are the broker's own values, read back
    ("store/broker_leases.py", "dispatch"),
}


def _rank(package: str) -> int | None:
    for rank, row in enumerate(LAYERS):
        if package in row:
            return rank
    return None  # the private modules at the top level (_json.py, _yaml.py...): below every layer


def _module_level_imports(path: Path) -> set[str]:
    """The ``agentgate`` packages ``path`` imports at its top level, not under TYPE_CHECKING and
    not inside a function (those are the imports on first use that the page describes)."""
    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("agentgate."):
            found.add(node.module.split(".")[1])
    return found


def test_the_imports_against_the_layer_picture_are_the_ones_the_page_names() -> None:
    """Review R60: architecture.md said that nothing imports upward; store/ imported audit/,
    drawn above it, and dispatch/broker/ and store/broker_leases.py imported upward unnamed."""
    upward = []
    for module in _modules():
        relative = module.relative_to(PACKAGE).as_posix()
        own = _rank(relative.split("/")[0].removesuffix(".py"))
        if own is None:
            continue
        for target in _module_level_imports(module):
            rank = _rank(target)
            if rank is None or rank >= own:
                continue
            if any(relative.startswith(where) and target == to for where, to in EXCEPTIONS):
                continue
            upward.append(f"{relative} -> {target}")
    assert upward == [], upward
    for words in ("`store/` uses `audit/`", "`GatedBroker`", "`store/broker_leases.py`"):
        assert words in PAGE, words
