"""What ``make demo`` and ``make test`` install (review R59), read from ``make -n`` (what make
would run, run by nobody) in a scratch copy of the Makefile and pyproject.toml: nothing is
installed, no venv is made."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
UV = "-m uv pip install --quiet --python .venv/bin/python"
DEMO_INSTALL = f"{UV} --compile-bytecode -e '.[langgraph]'"
FULL_INSTALL = f"{UV} -e '.[test,bench]'"
ENSURE_UV = (
    ".venv/bin/python -m uv --version >/dev/null 2>&1 || "
    ".venv/bin/python -m pip install --quiet --disable-pip-version-check 'uv>=0.13,<0.14'"
)

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """The Makefile and pyproject.toml, written an hour ago."""
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
        os.utime(tmp_path / name, (0, os.path.getmtime(tmp_path / name) - 3600))
    return tmp_path


def _would_run(checkout: Path, target: str) -> list[str]:
    result = subprocess.run(
        ["make", "--no-print-directory", "-n", target],
        cwd=checkout,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return result.stdout.splitlines()


def _installed(checkout: Path, *stamps: str) -> None:
    """A venv as an earlier command left it, with these stamps newer than pyproject.toml."""
    (checkout / ".venv" / "bin").mkdir(parents=True)
    (checkout / ".venv" / "bin" / "python").touch()
    for stamp in stamps:
        (checkout / ".venv" / stamp).touch()


def test_make_demo_on_a_fresh_checkout_installs_only_the_langgraph_extra(checkout: Path) -> None:
    """Review R59: `make demo` installed the test and bench extras (pytest, mypy, litellm, matplotlib...) to run one example."""
    commands = _would_run(checkout, "demo")
    assert any(line.endswith(DEMO_INSTALL) for line in commands), commands
    assert not any("[test" in line or "bench]" in line for line in commands), commands
    assert commands[0] == "python3 -m venv .venv"
    assert commands[-1] == ".venv/bin/python examples/research_team.py"


def test_make_demo_after_make_test_installs_nothing(checkout: Path) -> None:
    """Review R59: what `make test` installed holds what the demo needs: `make demo` then only runs it."""
    _installed(checkout, ".installed", ".installed-demo")
    assert _would_run(checkout, "demo") == [".venv/bin/python examples/research_team.py"]


def test_make_test_after_make_demo_installs_the_rest_into_the_same_venv(checkout: Path) -> None:
    """Review R59: after `make demo`, `make test` still installs the test and bench extras, without a new venv."""
    _installed(checkout, ".installed-demo")
    commands = _would_run(checkout, ".venv/.installed")
    assert [line for line in commands if "pip install" in line] == [
        ENSURE_UV,
        f".venv/bin/python {FULL_INSTALL}",
    ]
    assert not any("-m venv" in line for line in commands), commands


@pytest.mark.parametrize("target", ["demo", ".venv/.installed"])
def test_a_venv_made_before_uv_gets_uv_before_its_next_install(checkout: Path, target: str) -> None:
    """Review R81: the venv's creation (`python3 -m venv`, then pip installs uv) is the only step
    that installed uv, so a venv made before review R80, whose stamps pyproject.toml has since
    outdated, failed `No module named uv` at its next install. Rule: each install step first
    installs uv where `python -m uv` does not run, and the check is all it does where it does."""
    _installed(checkout, ".installed", ".installed-demo")
    changed = os.path.getmtime(checkout / "pyproject.toml")
    for stamp in (".installed", ".installed-demo"):  # pyproject.toml changed since both
        os.utime(checkout / ".venv" / stamp, (0, changed - 60))
    commands = _would_run(checkout, target)
    install = DEMO_INSTALL if target == "demo" else FULL_INSTALL
    assert ENSURE_UV in commands, commands
    start = commands.index(ENSURE_UV)
    assert commands[start + 1] == f".venv/bin/python {install}", commands
    assert not any("-m venv" in line for line in commands), commands
