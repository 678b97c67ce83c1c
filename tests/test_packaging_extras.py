"""Agentgate as `pip install agentgate-middleware` (no extra) leaves it.

The core install has neither LangChain/LangGraph (the ``langgraph`` extra) nor what only the
tests use (pytest, hypothesis, openai), and on Windows no uvloop (its requirement carries
``sys_platform != 'win32'``). Each test here runs ``python -m agentgate`` (the package's
``__main__``, what the console script runs) or imports the package in a child interpreter in
which importing any of those raises ModuleNotFoundError, as it would there, from an empty
working directory, so nothing of the checkout but the package is in reach.

What holds:
- every module of the package but ``agentgate.integrations.langgraph`` and its submodules
  imports without the extras (the CLI, the gateway, the broker, the simulator, the audit
  exporters);
- ``agentgate --help`` and every command group's ``--help`` answer (exit 0);
- docs/quickstart.md's command-line flow in an empty directory, with only the policy copied
  in: ``keys new`` (x4), ``policy lint``, ``grant issue --policy --role``, ``grant check``
  (allow, exit 0; deny above the role's limit, exit 1), ``audit checkpoint``, ``audit verify``;
  the store is ``.agentgate/agentgate.db`` under that directory, as the quickstart says;
- ``import agentgate.integrations.langgraph`` without the extra fails with ImportError (no
  other exception type, no partial import of it or of a submodule left in ``sys.modules``).

Checked by ``tests/install_matrix.sh`` (they need a build and PyPI, so not here): the wheel
holds py.typed, every module, ``__main__`` and the ``agentgate`` console script, and the same
quickstart flow runs from the wheel installed with its lowest ranges in a fresh venv; the
sdist is checked for what a test run from it needs (see the script's "sdist" step).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]

# Top-level modules the core install does not have: the langgraph extra and its dependencies,
# the test and bench extras, and uvloop (not installed on Windows).
ABSENT = (
    "langchain",
    "langchain_core",
    "langchain_openai",
    "langgraph",
    "langsmith",
    "openai",
    "pytest",
    "_pytest",
    "hypothesis",
    "litellm",
    "matplotlib",
    "cedarpy",
    "biscuit_auth",
    "uvloop",
)

_BLOCKER = f"""
import importlib.abc, sys
ABSENT = {ABSENT!r}
class _Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ABSENT:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, _Absent())
for loaded in [m for m in sys.modules if m.split(".")[0] in ABSENT]:
    del sys.modules[loaded]
"""


def _env(workdir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTGATE_", "PYTHON"))}
    env["HOME"] = str(workdir)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _python(workdir: Path, code: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``code`` run after the blocker, in a child interpreter whose working directory is
    ``workdir`` (``-I``: neither the working directory nor PYTHON* variables on the path)."""
    return subprocess.run(
        [sys.executable, "-I", "-c", _BLOCKER + code, *args],
        cwd=workdir,
        env=_env(workdir),
        capture_output=True,
        text=True,
        timeout=120,
    )


_RUN_MAIN = (
    "import runpy, sys\nsys.argv[0] = 'agentgate'\nrunpy.run_module('agentgate', run_name='__main__')\n"
)


def agentgate(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m agentgate ARGS`` without the extras, in ``workdir``."""
    return _python(workdir, _RUN_MAIN, *args)


@pytest.fixture
def empty(tmp_path: Path) -> Path:
    workdir = tmp_path / "work"
    workdir.mkdir()
    return workdir


# The newest release each langgraph-extra range must exclude, and why (R42's bisection with the
# matrix's LangGraph subset, tests/install_matrix.sh; the older ones are in test_packaging_wheel.py).
BROKEN_EXTRA_RELEASES = {
    # test_langgraph_stream_charges.py: AttributeError, CompiledStateGraph has no stream_events.
    "langgraph": ("1.1.10", "no stream_events(version='v3'), which docs/langgraph.md streams with"),
    # It admits aiosqlite 0.22, whose Connection is no longer a Thread: AsyncSqliteSaver.setup
    # calls conn.is_alive() and every async run on a SQLite checkpointer fails
    # (test_langgraph_resume_after_policy_change.py's sqlite-ainvoke cases).
    "langgraph-checkpoint-sqlite": ("3.0.2", "AsyncSqliteSaver fails with the aiosqlite 0.22 it admits"),
}


def test_the_langgraph_extra_excludes_the_releases_its_tests_fail_with() -> None:
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    requirements = {r.name.lower(): r for r in map(Requirement, extra["langgraph"])}
    for name, (version, why) in BROKEN_EXTRA_RELEASES.items():
        assert version not in requirements[name].specifier, f"{requirements[name]} admits {version}: {why}"
    # Each bisected floor is admitted: the ranges were not raised past what was tested.
    for name, floor in {
        "langgraph": "1.2.0",
        "langchain": "1.2.11",
        "langchain-core": "1.4.0",
        "langgraph-checkpoint-sqlite": "3.0.3",
        "langgraph-checkpoint-postgres": "3.0.3",
    }.items():
        assert floor in requirements[name].specifier, (requirements[name], floor)


def test_the_blocker_blocks_what_the_core_install_lacks(empty: Path) -> None:
    # Without this, every test below would pass vacuously with the extras importable.
    probe = _python(
        empty,
        "import importlib\n"
        "for name in ('langchain_core', 'langgraph.types', 'openai', 'uvloop', 'pytest'):\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ModuleNotFoundError:\n"
        "        continue\n"
        "    raise SystemExit(f'{name} imported')\n"
        "import agentgate, sys\n"
        "print(agentgate.__file__)\n",
    )
    assert probe.returncode == 0, probe.stdout + probe.stderr
    # The package imported is the one this suite tests (the checkout, editable, or the wheel the
    # matrix installs), never one found through the working directory.
    assert Path(probe.stdout.strip()).parent.parent != empty


def test_every_module_but_the_langgraph_integration_imports_without_the_extras(empty: Path) -> None:
    code = """
import importlib, json, pkgutil, sys, traceback
import agentgate
failed = {}
names = [m.name for m in pkgutil.walk_packages(agentgate.__path__, "agentgate.")]
for name in names:
    if name.split(".")[:3] == ["agentgate", "integrations", "langgraph"] or name == "agentgate.__main__":
        continue
    try:
        importlib.import_module(name)
    except BaseException as exc:
        failed[name] = f"{type(exc).__name__}: {exc}"
for name in agentgate.__all__:
    try:
        getattr(agentgate, name)
    except BaseException as exc:
        failed["agentgate." + name] = f"{type(exc).__name__}: {exc}"
print(json.dumps({"count": len(names), "failed": failed}))
"""
    result = _python(empty, code)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["failed"] == {}
    assert report["count"] > 50  # the walk found the package, not an empty namespace


def test_the_langgraph_integration_without_its_extra_fails_as_an_import_error(empty: Path) -> None:
    code = """
import sys
try:
    import agentgate.integrations.langgraph
except ImportError as exc:
    left = [m for m in sys.modules if m.split(".")[:3] == ["agentgate", "integrations", "langgraph"]]
    print("ImportError", exc.name, left, "agentgate-middleware[langgraph]" in str(exc))
else:
    print("imported")
"""
    result = _python(empty, code)
    assert result.returncode == 0, result.stderr[-3000:]
    kind, name, left, says_extra = result.stdout.strip().split(" ", 3)
    assert kind == "ImportError"
    assert name.split(".")[0] in ABSENT
    assert left == "[]"
    assert says_extra == "True"  # names the extra to install (the lead's fix in R42)


def test_every_command_groups_help_answers_without_the_extras(empty: Path) -> None:
    top = agentgate(empty, "--help")
    assert top.returncode == 0, top.stderr[-3000:]
    assert top.stdout.startswith("usage: agentgate")
    groups = ["keys", "grant", "approval", "policy", "audit", "tasks", "broker", "serve", "store"]
    for group in groups:
        assert group in top.stdout
    code = (
        "import sys\n"
        "from agentgate.cli.main import main\n"
        "bad = {}\n"
        f"for group in {groups!r}:\n"
        "    try:\n"
        "        main([group, '--help'])\n"
        "    except SystemExit as exc:\n"
        "        if exc.code not in (0, None): bad[group] = exc.code\n"
        "    else:\n"
        "        bad[group] = 'returned without exiting'\n"
        "print('BAD', bad, file=sys.stderr)\n"
    )
    result = _python(empty, code)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "BAD {}" in result.stderr, result.stderr[-3000:]
    assert list(empty.iterdir()) == []  # --help writes nothing (no store, no key)


# The quickstart's commands after the first, each one ``main(argv)`` call in ONE child
# interpreter (the blocker in place, the same working directory and HOME): an extra imported by
# any verb raises there as in a process of its own, and one interpreter start replaces nine.
_RUN_STEPS = (
    "import contextlib, io, json, sys\n"
    "from agentgate.cli.main import main\n"
    "done = []\n"
    "for argv in json.loads(sys.argv[1]):\n"
    "    out, err = io.StringIO(), io.StringIO()\n"
    "    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):\n"
    "        code = main(argv)\n"
    "    done.append([argv, code, out.getvalue(), err.getvalue()])\n"
    "sys.__stdout__.write(json.dumps(done))\n"
)


def test_the_quickstart_command_line_flow_runs_in_an_empty_directory_without_the_extras(
    empty: Path,
) -> None:
    shutil.copy2(ROOT / "policies" / "support.yaml", empty / "support.yaml")
    # The first command as a process of its own: ``python -m agentgate``, the package's __main__.
    made = agentgate(empty, "keys", "new", "ops-root", "--dir", "keys")
    assert made.returncode == 0, made.stderr
    assert made.stdout.strip().startswith("did:key:z")

    def check(amount: int) -> list[str]:
        call = {"order_id": "O-1", "amount": amount, "currency": "EUR"}
        return [
            "grant",
            "check",
            "agent.token",
            "--as",
            "keys/support-agent.key",
            "--trust",
            "keys/ops-root.pub",
            "--tool",
            "payments.refund",
            "--args",
            json.dumps(call),
        ]

    steps = [
        *(["keys", "new", name, "--dir", "keys"] for name in ("support-agent", "alice", "bob")),
        ["policy", "lint", "support.yaml"],
        [
            "grant",
            "issue",
            "--issuer",
            "keys/ops-root.key",
            "--to",
            "keys/support-agent.pub",
            "--policy",
            "support.yaml",
            "--role",
            "support-agent",
            "--out",
            "agent.token",
        ],
        check(100),
        check(5000),  # above the role's `le: 2000`
        ["audit", "checkpoint"],
        ["audit", "verify"],
    ]
    ran = _python(empty, _RUN_STEPS, json.dumps(steps))
    assert ran.returncode == 0 and ran.stderr == "", ran.stderr
    results = json.loads(ran.stdout)
    assert [argv for argv, *_ in results] == steps
    (*made_keys, lint, issued, allowed, denied, signed, verified) = [tuple(r[1:]) for r in results]
    for code, out, err in made_keys:
        assert code == 0, err
        assert out.strip().startswith("did:key:z")
    assert (empty / "keys" / "ops-root.key").stat().st_mode & 0o777 == 0o600
    assert (empty / "keys" / "support-agent.key").stat().st_mode & 0o777 == 0o600

    assert lint[0] == 0, lint[1] + lint[2]
    assert issued[0] == 0, issued[2]
    assert (empty / "agent.token").is_file()
    assert allowed[0] == 0, allowed[1] + allowed[2]
    assert allowed[1].startswith("allow: ")
    assert denied[0] == 1, denied[1] + denied[2]
    assert denied[1].startswith("deny: ")

    # The store is where the quickstart says, under the working directory.
    assert (empty / ".agentgate" / "agentgate.db").is_file()
    assert signed[0] == 0, signed[1] + signed[2]
    assert verified[0] == 0, verified[1] + verified[2]
    assert verified[1].startswith("intact:"), verified[1]
    assert "1 checkpoint" in verified[1], verified[1]
    # Nothing written outside the working directory (HOME is it too) but what was asked.
    assert sorted(p.name for p in empty.iterdir()) == [".agentgate", "agent.token", "keys", "support.yaml"]
