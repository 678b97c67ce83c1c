"""Agentgate as a user installs it, from a wheel, not from the source tree.

The wheel is built once per session from a copy of the package's sources (pip, with build
isolation, as a user's ``pip install /path/to/checkout`` builds it; about 6 s). The slow
procedure (fresh venvs, the lower and the newest releases every range allows, the suite run
against them) is described in ``tests/install_matrix.sh``, which is not collected.
"""

from __future__ import annotations

import email
import email.message
import importlib.metadata
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import agentgate

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "agentgate"

# The newest release that each range must exclude, with the reason it cannot be installed or
# used (each found by installing the range's lower bound; tests/install_matrix.sh).
BROKEN_RELEASES = {
    # psycopg 3.2.0's `binary` extra requires psycopg-binary==3.2.0.dev1, which was never
    # published: `pip install 'psycopg[binary]==3.2.0'` fails with "No matching distribution".
    "psycopg": ("3.2.0", "its binary extra names psycopg-binary==3.2.0.dev1, never published"),
    # Below 2.9 langsmith (which langchain-core installs) fails to import (NameError:
    # FeedbackConfigSchema); below 2.11 `agentgate policy schema` differs from the schema file
    # that ships in policies/ (tests/test_policy_load.py fails).
    "pydantic": ("2.10.6", "langsmith fails to import below 2.9; the policy schema differs below 2.11"),
    # With websockets >= 14 installed (langsmith requires it), uvicorn < 0.50 imports
    # websockets.legacy when it starts a server: a DeprecationWarning, so under -W error (and
    # this suite's filterwarnings = error) the gateway and the simulated backends never start.
    "uvicorn": ("0.49.0", "starting a server raises websockets.legacy's DeprecationWarning"),
    # langgraph < 1.1.5 admits langgraph-prebuilt >= 1.0.9, which imports ExecutionInfo and
    # ServerInfo from langgraph.runtime: agentgate.integrations.langgraph fails to import.
    "langgraph": ("1.1.4", "the langgraph-prebuilt it installs imports names it lacks"),
    # langchain < 1.2.11 requires langgraph < 1.1; langchain 1.2.11 requires langchain-core >= 1.2.10.
    "langchain": ("1.2.10", "it cannot be installed beside langgraph >= 1.1.5"),
    "langchain-core": ("1.2.9", "it cannot be installed beside langchain >= 1.2.11"),
    # `make test` lints and type-checks: ruff 0.6.0 finds 43 errors and would reformat 4 files,
    # 0.16.10 still sorts imports differently; mypy 1.10.0 finds 16 errors under --strict.
    "ruff": ("0.16.10", "`ruff check` fails on this tree"),
    "mypy": ("1.10.0", "`mypy agentgate` (strict) fails"),
}
# Linters whose minor releases change what they report: each range holds the one minor this tree
# is clean under, the one installed here, so a fresh clone's `make test` runs the same checks.
LINTERS = ("ruff", "mypy")


class Wheel:
    """The names inside the built wheel and its parsed METADATA."""

    def __init__(self, path: Path) -> None:
        with zipfile.ZipFile(path) as archive:
            self.names = set(archive.namelist())
            info = next(n for n in self.names if n.endswith(".dist-info/METADATA"))
            self.metadata: email.message.Message = email.message_from_bytes(archive.read(info))
            points = next(n for n in self.names if n.endswith(".dist-info/entry_points.txt"))
            self.entry_points = archive.read(points).decode()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Wheel:
    source = tmp_path_factory.mktemp("r22-source")
    shutil.copytree(PACKAGE, source / "agentgate", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    out = tmp_path_factory.mktemp("r22-wheel")
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    (path,) = out.glob("agentgate_middleware-*.whl")
    return Wheel(path)


def test_the_wheel_marks_the_package_as_typed(wheel: Wheel) -> None:
    # Without py.typed, `mypy --strict` on a user's code that imports agentgate from an
    # installed wheel fails: 'module is installed, but missing library stubs or py.typed marker'.
    assert (PACKAGE / "py.typed").is_file()
    assert "agentgate/py.typed" in wheel.names


def test_the_wheel_holds_every_file_of_the_package(wheel: Wheel) -> None:
    # Any data file added under agentgate/ later must ship too: code that finds it next to
    # itself works from the source tree and fails from an installed wheel.
    # The files git tracks (a stray file of a working tree is no part of the package); outside a
    # git checkout, every file but bytecode.
    listed = subprocess.run(["git", "ls-files", "agentgate"], cwd=ROOT, capture_output=True, text=True)
    if listed.returncode == 0 and listed.stdout.strip():
        sources = set(listed.stdout.split())
    else:
        sources = {
            path.relative_to(ROOT).as_posix()
            for path in PACKAGE.rglob("*")
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"
        }
    assert sources - wheel.names == set()


def test_the_wheel_installs_the_command_and_its_version(wheel: Wheel) -> None:
    assert "agentgate = agentgate.cli:run" in wheel.entry_points  # review R71: was cli.main:main
    assert wheel.metadata["Name"] == "agentgate-middleware"
    assert wheel.metadata["Version"] == agentgate.__version__
    assert wheel.metadata["Requires-Python"] == ">=3.11"


def test_no_range_admits_a_release_that_cannot_be_installed_or_used(wheel: Wheel) -> None:
    requirements = [Requirement(line) for line in wheel.metadata.get_all("Requires-Dist") or []]
    seen = set()
    for requirement in requirements:
        broken = BROKEN_RELEASES.get(requirement.name.lower())
        if broken is None:
            continue
        seen.add(requirement.name.lower())
        version, why = broken
        assert version not in requirement.specifier, f"{requirement} admits {version}: {why}"
    assert seen == set(BROKEN_RELEASES)


def test_the_linters_ranges_hold_the_releases_this_tree_is_checked_with(wheel: Wheel) -> None:
    requirements = {
        requirement.name.lower(): requirement
        for requirement in (Requirement(line) for line in wheel.metadata.get_all("Requires-Dist") or [])
    }
    for name in LINTERS:
        installed = importlib.metadata.version(name)
        assert requirements[name].specifier.contains(installed), (requirements[name], installed)
        major, minor = (int(part) for part in installed.split(".")[:2])
        assert not requirements[name].specifier.contains(f"{major}.{minor + 1}.0"), requirements[name]
